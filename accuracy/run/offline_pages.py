"""asv's HTML pages without internet: its CDN scripts and styles, vendored from the npm registry.

asv 0.6.6's index.html loads jQuery, flot and its plugins, stupidtable, blueimp-md5 and
bootstrap from public CDNs; offline it shows only its error page. `make setup` fetches the
pinned npm packages below into a cache inside the virtual environment (each tarball checked
against the registry's sha512 integrity); after every `asv publish` opbench runs,
`make_offline` copies the files into the HTML directory and points the pages at them. Files
that are byte-for-byte what asv's page names are also checked against asv's own SRI hash.

Not vendored in git: the pins (name, version, integrity) say exactly what is used, the cache
comes from the same registry step as the rest of `make setup`, and no third-party code is
kept by hand in this repository.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import shutil
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from accuracy.core.errors import warn
from accuracy.core.files import write_atomic

REGISTRY = "https://registry.npmjs.org"
VENDOR_DIR = "vendor"  # inside the html directory
INDEX = "index.html"


@dataclass(frozen=True)
class NpmPackage:
    """One pinned npm package and the files asv's pages load from it.

    `urls` maps each CDN address in asv's index.html to the file in the package that replaces
    it; `extra` are files those load in turn (bootstrap's fonts) and the licence. `as_cdn`:
    the files are the CDN's bytes, so asv's SRI hash must match them.
    """

    name: str
    version: str
    integrity: str  # the registry's `dist.integrity` of the tarball
    urls: dict[str, str]
    extra: tuple[str, ...] = ()
    as_cdn: bool = True

    @property
    def tarball(self) -> str:
        return f"{REGISTRY}/{self.name}/-/{self.name}-{self.version}.tgz"

    @property
    def folder(self) -> str:
        return f"{self.name}-{self.version}"

    @property
    def files(self) -> tuple[str, ...]:
        return (*self.urls.values(), *self.extra, "package.json")


_CDNJS_FLOT = "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3"
PACKAGES: tuple[NpmPackage, ...] = (
    NpmPackage(
        "jquery",
        "3.3.1",
        "sha512-Ubldcmxp5np52/ENotGxlLe6aGMvmF4R8S6tZjsP6Knsaxd/xp3Zrh50cG93lR6nPXyUFwzN3ZSOQI0wRJNdGg==",
        {"https://code.jquery.com/jquery-3.3.1.min.js": "dist/jquery.min.js"},
        ("LICENSE.txt",),
    ),
    # npm's flot 0.8.3 has the unminified sources of cdnjs's minified files
    NpmPackage(
        "flot",
        "0.8.3",
        "sha512-xg2otcTJDvS+ERK+my4wxG/ASq90QURXtoM4LhacCq0jQW2jbyjdttbRNqU2cPykrpMvJ6b2uSp6SAgYAzj9tQ==",
        {
            f"{_CDNJS_FLOT}/jquery.flot{part}.min.js": f"jquery.flot{part}.js"
            for part in ("", ".time", ".selection", ".categories")
        },
        ("LICENSE.txt",),
        as_cdn=False,
    ),
    NpmPackage(
        "flot-orderbars",
        "1.0.0",  # MIT, stated in its package.json (it ships no licence file)
        "sha512-Jv51fvzevUjNXEeozpwEKfPjhiZhfiJddv0WHjduUTCmSF+7T5K7C9c9Y1wIVmUhDBv5fLMjgbwKecT0GIKPZA==",
        {
            "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js": (
                "js/jquery.flot.orderBars.js"
            )
        },
    ),
    # cdnjs's stupidtable 1.0.1 is not on npm; 1.1.3 keeps the stupidtable()/stupidsort() asv calls
    NpmPackage(
        "stupid-table-plugin",
        "1.1.3",
        "sha512-2Vk7XouQPxUQPRe9w0Fu7ZZ8kHLK7rDoLMsCgtKxRNJ7f4dSOGvW9CkHsq5wD6QsaEnWoyLBYH3xOEsrK3yWBg==",
        {"https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js": "stupidtable.min.js"},
        ("LICENSE",),
        as_cdn=False,
    ),
    NpmPackage(
        "blueimp-md5",
        "2.19.0",
        "sha512-DRQrD6gJyy8FbiE4s+bDoXS9hiW3Vbx5uCdwvcCf3zLHL+Iv7LtGHLpr+GZV8rHG8tK766FGYBwRbu8pELTt+w==",
        {"https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js": "js/md5.min.js"},
        ("LICENSE.txt",),
    ),
    NpmPackage(
        "bootstrap",
        "3.1.1",
        "sha512-TAzqS8E/ISpVHP29gYhy+1NSV+FJwApDVQhDfgLYsIuUDJiqJzH2DfORN5tiu+Ie2iBLrzEG34t4Rf465cigqg==",
        {
            "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js": "dist/js/bootstrap.min.js",
            "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css": "dist/css/bootstrap.min.css",
        },
        ("LICENSE", *(f"dist/fonts/glyphicons-halflings-regular.{ext}" for ext in ("eot", "svg", "ttf", "woff"))),
    ),
)
BY_URL = {url: (package, path) for package in PACKAGES for url, path in package.urls.items()}

# A tag that loads something: <script src=...> or <link href=...>, with its attributes.
_LOADING_TAG = re.compile(r"<(?:script|link)\b[^>]*?\b(?:src|href)=\"(https?://[^\"]+)\"[^>]*>")
_REMOTE_ONLY = re.compile(r"\s+(?:integrity|crossorigin|referrerpolicy)=\"[^\"]*\"")
_SRI = re.compile(r"\bintegrity=\"(sha256|sha384|sha512)-([^\"]+)\"")


class FetchError(Exception):
    """A package could not be downloaded or did not match its pin."""


def default_cache() -> Path:
    """Inside the virtual environment: `make setup` fills it, `make clean` removes it."""
    return Path(sys.prefix) / "share" / "opbench" / "asv-www"


def _sri(data: bytes, algorithm: str) -> str:
    return base64.b64encode(hashlib.new(algorithm, data).digest()).decode("ascii")


def fetch(cache: Path | None = None) -> Path:
    """Download every pinned package not yet in `cache`, check it, unpack the files used."""
    cache = cache or default_cache()
    for package in PACKAGES:
        target = cache / package.folder
        if all((target / path).is_file() for path in package.files):
            continue
        try:
            with urllib.request.urlopen(package.tarball, timeout=60) as response:
                data = response.read()
        except OSError as exc:
            raise FetchError(f"cannot download {package.tarball}: {exc}") from exc
        algorithm, _, expected = package.integrity.partition("-")
        if _sri(data, algorithm) != expected:
            raise FetchError(f"{package.tarball} does not match its pinned integrity {package.integrity}")
        staging = cache / f".{package.folder}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            for path in package.files:
                member = archive.extractfile(f"package/{path}")
                if member is None:
                    raise FetchError(f"{package.tarball} has no file {path}")
                (staging / path).parent.mkdir(parents=True, exist_ok=True)
                (staging / path).write_bytes(member.read())
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return cache


def remote_urls(page: str) -> list[str]:
    """The addresses a page loads scripts or styles from over the network."""
    return _LOADING_TAG.findall(page)


def make_offline(html_dir: Path, cache: Path | None = None) -> list[str]:
    """Copy the vendored files into `html_dir` and point its index.html at them.

    Returns one line per problem (nothing to fetch from, an address opbench does not vendor);
    the page then keeps that CDN address and still works online.
    """
    index = Path(html_dir) / INDEX
    page = index.read_text(encoding="utf-8")
    problems = [f"{index} loads {url}, which opbench does not vendor" for url in remote_urls(page) if url not in BY_URL]
    try:
        cache = fetch(cache)
    except FetchError as exc:
        return [*problems, f"asv's pages still need the internet: {exc}"]

    def local(match: re.Match) -> str:
        url = match.group(1)
        if url not in BY_URL:
            return match.group(0)
        package, path = BY_URL[url]
        sri = _SRI.search(match.group(0))
        if package.as_cdn and sri and _sri((cache / package.folder / path).read_bytes(), sri.group(1)) != sri.group(2):
            problems.append(f"{package.folder}/{path} is not the file asv's page names ({url}); kept the CDN")
            return match.group(0)
        return _REMOTE_ONLY.sub("", match.group(0)).replace(url, f"{VENDOR_DIR}/{package.folder}/{path}")

    page = _LOADING_TAG.sub(local, page)
    for package in PACKAGES:
        shutil.copytree(cache / package.folder, Path(html_dir) / VENDOR_DIR / package.folder, dirs_exist_ok=True)
    write_atomic(index, page)
    return problems


GRAPH_SCRIPT = "graphdisplay.js"
MAX_LEGEND = 12  # series a graph names in its legend; asv draws the legend over the plot
# (asv 0.6.6's text, opbench's, what is lost where the text is not there: another asv version?)
GRAPH_PATCHES = (
    # asv draws at most 8 curves by default and hides the other implementations of an op; every
    # implementation is drawn (and at least the first value of each further parameter)
    (
        "j < param_values.length && (j+1)*count <= max_curves;",
        "j < param_values.length && (k == 0 || j == 0 || (j+1)*count <= max_curves);",
        "graphs may hide implementations",
    ),
    # ... and a legend of every series then covers the plot (Matmul.track_max_ulp: 48 entries):
    # a crowded graph has none; hovering a curve names it, the parameter buttons pick fewer
    (
        "show: show_legend,",
        f"show: show_legend && graphs.length <= {MAX_LEGEND},",
        "crowded graphs keep a legend over the plot",
    ),
)


def patch_graphs(html_dir: Path) -> list[str]:
    """Patch asv's graph page: every implementation drawn, no legend over a crowded graph."""
    script = Path(html_dir) / GRAPH_SCRIPT
    original = text = script.read_text(encoding="utf-8")
    problems = []
    for asv_text, ours, lost in GRAPH_PATCHES:
        if ours not in text and asv_text not in text:
            problems.append(f"{script} lacks asv 0.6.6's `{asv_text}` (another asv version?); {lost}")
        text = text.replace(asv_text, ours) if ours not in text else text
    if text != original:
        write_atomic(script, text)
    return problems


def serve_command(html_dir: Path, port: int = 8000) -> str:
    """The one command that shows asv's pages: they fetch their data (index.json, graphs/) with
    requests a browser refuses to pages opened from disk, which show only asv's "Error fetching
    content. Perhaps web server has gone down." Served from 127.0.0.1 they work."""
    return f"{sys.executable} -m http.server {port} --bind 127.0.0.1 --directory {html_dir}"


def serve_line(html_dir: Path, port: int = 8000) -> str:
    """What `opbench run` ends with: the command, and the address to open."""
    return f"{serve_command(html_dir, port)} then open http://127.0.0.1:{port}/"


def finish_pages(html_dir: Path, cache: Path | None = None) -> list[str]:
    """Everything opbench does to the pages `asv publish` writes: offline, every implementation
    drawn, no legend over a crowded graph."""
    return [*make_offline(html_dir, cache), *patch_graphs(html_dir)]


def main() -> int:
    """`python -m accuracy.run.offline_pages`: fill the cache (run by `make setup`)."""
    try:
        print(f"asv page assets in {fetch()}")
    except FetchError as exc:
        warn(f"{exc}; asv's HTML pages will load them from CDNs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
