"""A DataLoader that times its batches: what the data-wait measurement (``datawait``) needs to
tell the wait for data from the loop's own work. Torch only, no Lightning: the LM's data path
(``experiments.lm.sampler``) and its benchmark use it without the training stack."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader


class TimedLoader(DataLoader):
    """A DataLoader that keeps the time its iterators spend producing batches.

    ``fetch_s`` adds up every ``next()`` (with workers, the wait for theirs) and ``fetched_at``
    is when the latest batch came out: what :class:`~experiments.common.datawait.DataWait`
    needs to tell the wait for data from Lightning's own work between two steps.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fetch_s = 0.0
        self.fetched_at: float | None = None

    # torch types DataLoader.__iter__ as its private _BaseDataLoaderIter; this iterator yields the same batches.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return _Timed(super().__iter__(), self)


class _Timed:
    """An iterator of a :class:`TimedLoader`: the loader's own, timed at each ``next()``."""

    def __init__(self, inner: Iterator[Any], loader: TimedLoader):
        self.inner, self.loader = inner, loader

    def __iter__(self) -> _Timed:
        return self

    def __next__(self) -> Any:
        start = time.perf_counter()
        try:
            return next(self.inner)
        finally:
            self.loader.fetched_at = time.perf_counter()
            self.loader.fetch_s += self.loader.fetched_at - start

    def __len__(self) -> int:
        # torch's loader iterators have a length; their class, the type that says so, is private.
        return len(self.inner)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # what Lightning or torch ask of the loader's own iterator
