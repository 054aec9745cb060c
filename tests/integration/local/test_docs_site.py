"""The built documentation site in headless Chromium, served over HTTP as a reader gets it: every
page of the navigation loads, the search finds a term, no internal link or anchor is broken, and
screenshots of the home page and a reference page are saved (their paths printed) to look at."""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import threading
import time
from html.parser import HTMLParser
from urllib.parse import unquote, urljoin, urlsplit

import pytest
import yaml
from support import ROOT
from test_docs_build import build_site
from test_report_in_chromium import chromium, headless

pytestmark = pytest.mark.slow

SCREENSHOTS = ROOT / "benchmarks/out/docs-site"
SEARCHED = "sbatch"

# Loaded into a frame of the site's own origin: follows every link of the home page's navigation,
# then searches through Material's own search (`?q=`, answered by its web worker), and posts what
# it saw back to the test's server. Real time, not virtual: the search index loads in a worker.
HARNESS = """<!doctype html><html><body><script>
const sleep = ms => new Promise(r => setTimeout(r, ms));
const frame = url => new Promise(done => {
  const f = document.createElement('iframe');
  f.width = 1200; f.height = 800;
  f.onload = () => done(f);
  f.src = url;
  document.body.appendChild(f);
});
(async () => {
  const out = {nav: [], pages: [], results: [], meta: null, error: null};
  try {
    const home = await frame('/');
    out.nav = [...home.contentDocument.querySelectorAll('nav.md-nav--primary a.md-nav__link[href]')]
      .map(a => new URL(a.getAttribute('href'), home.contentWindow.location.href).pathname);
    home.remove();
    for (const path of [...new Set(out.nav)]) {
      const f = await frame(path);
      const h1 = f.contentDocument.querySelector('article h1');
      out.pages.push({path, title: f.contentDocument.title, h1: h1 ? h1.textContent : null});
      f.remove();
    }
    const s = await frame('/?q=TERM');
    for (let i = 0; i < 300 && !out.results.length; i++) {
      await sleep(200);
      out.results = [...s.contentDocument.querySelectorAll('.md-search-result__item a')].map(a => a.getAttribute('href'));
    }
    const meta = s.contentDocument.querySelector('.md-search-result__meta');
    out.meta = meta ? meta.textContent : null;
  } catch (e) {
    out.error = String(e);
  }
  await fetch('/__report', {method: 'POST', body: JSON.stringify(out)});
})();
</script></body></html>"""


class _Site(http.server.SimpleHTTPRequestHandler):
    reports: list[dict] = []

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def do_POST(self):
        size = int(self.headers["Content-Length"])
        type(self).reports.append(json.loads(self.rfile.read(size)))
        self.send_response(204)
        self.end_headers()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The site, built strictly, served on loopback: (its folder, its base URL)."""
    site = tmp_path_factory.mktemp("docs") / "site"
    done = build_site(site)
    assert done.returncode == 0, done.stderr[-4000:]
    (site / "__harness.html").write_text(HARNESS.replace("TERM", SEARCHED))
    handler = type("Handler", (_Site,), {"reports": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield site, f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def report(served, tmp_path_factory):
    """What the harness page saw, from one Chromium that runs until it reports (at most 3 minutes)."""
    site, base, handler = served
    browser = chromium()
    profile = tmp_path_factory.mktemp("chromium-profile")
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}"]
    # A debugging port keeps headless Chromium open on the page until the test ends it.
    proc = subprocess.Popen(
        [*argv, "--remote-debugging-port=0", f"{base}/__harness.html"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 180
        while not handler.reports and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
    finally:
        proc.terminate()
        try:
            _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
    assert handler.reports, f"the harness page reported nothing within 3 minutes; Chromium said:\n{stderr[-3000:]}"
    seen = handler.reports[0]
    assert seen["error"] is None, seen["error"]
    return seen


def nav_paths() -> list[str]:
    """The URL path of every page in mkdocs.yml's nav, in order."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    found: list[str] = []

    def walk(entries):
        for entry in entries:
            for value in entry.values() if isinstance(entry, dict) else [entry]:
                if isinstance(value, list):
                    walk(value)
                else:
                    page = value.removesuffix(".md")
                    found.append("/" if page == "index" else f"/{page.removesuffix('/index')}/")

    walk(config["nav"])
    return found


def test_every_page_of_the_navigation_loads(report):
    assert list(dict.fromkeys(report["nav"])) == nav_paths(), "the rendered navigation is not mkdocs.yml's nav"
    broken = [p for p in report["pages"] if not p["h1"] or "dvc-slurm-orchestrator" not in p["title"]]
    assert not broken, f"pages of the navigation that did not load as pages of the site: {broken}"
    assert len(report["pages"]) == len(nav_paths())


def test_the_search_finds_a_term(report):
    assert report["results"], f"searching {SEARCHED!r} found nothing (the search said: {report['meta']!r})"
    assert any("/reference/templates/" in href for href in report["results"]), report["results"]
    assert report["meta"] and "matching document" in report["meta"], report["meta"]


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        for name in ("id", "name") if tag == "a" else ("id",):
            if attributes.get(name):
                self.ids.add(attributes[name])
        for name in ("href", "src"):
            if attributes.get(name):
                self.refs.append(attributes[name])


def test_no_internal_link_or_anchor_is_broken(served):
    site, _, _ = served
    pages: dict[str, _Links] = {}
    for page in site.rglob("*.html"):
        parsed = _Links()
        parsed.feed(page.read_text())
        pages["/" + page.relative_to(site).as_posix()] = parsed
    broken, checked = [], 0
    for path, parsed in sorted(pages.items()):
        for ref in parsed.refs:
            target = urlsplit(urljoin(path, ref))
            if target.scheme or target.netloc:
                continue  # another site's: not ours to check offline
            file = unquote(target.path)
            file = file + "index.html" if file.endswith("/") else file
            if (site / file.lstrip("/")).is_dir():
                file += "/index.html"
            checked += 1
            if not (site / file.lstrip("/")).is_file():
                broken.append(f"{path}: {ref} (no {file})")
            elif target.fragment and file in pages and unquote(target.fragment) not in pages[file].ids:
                broken.append(f"{path}: {ref} (no anchor #{target.fragment} in {file})")
    assert checked > 500, f"only {checked} internal links found: the crawl did not see the site"
    assert not broken, "broken internal links:\n" + "\n".join(broken)


@pytest.mark.parametrize(("name", "path"), [("home", "/"), ("reference-profiles", "/reference/profiles/")])
def test_screenshot(served, tmp_path, name, path):
    _, base, _ = served
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / f"{name}.png"
    shot.unlink(missing_ok=True)
    done = headless(
        chromium(), tmp_path / "profile", "--window-size=1280,1000", "--virtual-time-budget=5000", f"--screenshot={shot}", base + path
    )
    assert shot.is_file(), done.stderr[-2000:]
    from PIL import Image

    with Image.open(shot) as image:
        colors = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colors is None or len(colors) > 50, "the screenshot is blank"
    print(f"screenshot of {path}: {shot}")
