"""The Great Expectations Data Docs' stylesheets, scripts and fonts, served by the KFS page itself.

GX's page templates (great-expectations 1.24.1) load bootstrap, jQuery,
bootstrap-table, Font Awesome, vega and friends from public CDNs, so a report
opened on a machine without internet access renders unstyled.  The KFS page
serves those files from ``static/datadocs/`` (public, like ``kfs.css``) and,
when it serves a Data Docs HTML file, points the page's ``<script src>`` and
``<link href>`` at them (`localize_html`).  The reports in the store stay
GX's own HTML, unchanged: opened anywhere else they load the CDNs as before,
and reports written before this module existed are served styled too.

No installed package ships these files (GX ships only its own CSS, fonts and
images, which its Data Docs site copies into every report), so they are
vendored, byte for byte as npm publishes them, each package's licence beside
its files::

    static/datadocs/<npm package>@<version>/<path inside the npm package>

the layout of the CDN URLs themselves.  `FILES` pins every vendored file by
sha256, `CDN_FILES` maps each CDN URL the pinned GX writes to one of them (the
two scripts GX loads with ``integrity=`` keep working: the bytes are the
ones the hash names).  A GX upgrade that changes a URL leaves it pointing at
the CDN, and ``tests/airflow/test_kfs_page.py`` fails on it.  To change a
version, edit the tables and run::

    python -m kfs_airflow.ui.datadocs_assets      # fetches with `npm pack`, checks every sha256

which is also ``make datadocs-assets``.  Only that refresh needs npm; installing
and running KFS never does.
"""

from __future__ import annotations

import hashlib
import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CDN_FILES",
    "DIRECTORY",
    "FILES",
    "GX_LOGO_URL",
    "URL_PATH",
    "VendoredFile",
    "localize_html",
    "verify",
]

#: Where the files live, and the path the page app serves them under (below its mount point).
DIRECTORY = Path(__file__).parent / "static" / "datadocs"
URL_PATH = "static/datadocs/"

# Python 3.11's own table lacks the web font types and names JavaScript the old way; a
# host's /etc/mime.types may say otherwise.  These answers do not depend on the host.
for _type, _extension in (
    ("font/woff2", ".woff2"),
    ("font/ttf", ".ttf"),
    ("text/javascript", ".js"),
    ("text/css", ".css"),
):
    mimetypes.add_type(_type, _extension)


@dataclass(frozen=True)
class VendoredFile:
    """One file of an npm package, as published (``sha256`` of its bytes)."""

    package: str
    version: str
    path: str
    sha256: str

    @property
    def local_path(self) -> str:
        """``<package>@<version>/<path>``, relative to `DIRECTORY` and to `URL_PATH`."""
        return f"{self.package}@{self.version}/{self.path}"


def _files(package: str, version: str, *files: tuple[str, str]) -> list[VendoredFile]:
    return [VendoredFile(package, version, path, sha256) for path, sha256 in files]


#: Every vendored file that npm publishes (two licence notes, for packages that
#: ship no licence file, are ours: popper.js@1.12.9/LICENSE and vega@5.33.1/LICENSE).
FILES: tuple[VendoredFile, ...] = (
    *_files(
        "bootstrap",
        "4.3.1",
        (
            "dist/css/bootstrap.min.css",
            "60b19e5da6a9234ff9220668a5ec1125c157a268513256188ee80f2d2c8d8d36",
        ),
        (
            "dist/js/bootstrap.min.js",
            "0a34a87842c539c1f4feec56bba982fd596b73500046a6e6fe38a22260c6577b",
        ),
        ("LICENSE", "074d99b8c25d13649dac52080900ee8c8d2373d07ea3f4fb67bd2bf79aa8cc72"),
    ),
    *_files(
        "jquery",
        "3.7.1",
        ("dist/jquery.min.js", "fc9a93dd241f6b045cbff0481cf4e1901becd0e12fb45166a8f17f95823f0b1a"),
        ("LICENSE.txt", "d4db9ebe6f29f5168eac45ad713f055623ac5d0dcd5ba92da23d650ae012020d"),
    ),
    *_files(
        "popper.js",
        "1.12.9",
        (
            "dist/umd/popper.min.js",
            "a52f7aa54d7bcaafa056ee0a050262dfc5694ae28dee8b4cac3429af37ff0d66",
        ),
    ),
    *_files(
        "bootstrap-table",
        "1.19.1",
        (
            "dist/bootstrap-table.min.css",
            "643f536f6982af4d7287af23f89ad457dd7e4a82f9c695330a112b0881c30a4a",
        ),
        (
            "dist/bootstrap-table.min.js",
            "06a571a9beb50bd5ddd60517159775dfec1f3e798fff38fb117ae2350dc9ba9d",
        ),
        (
            "dist/extensions/filter-control/bootstrap-table-filter-control.min.js",
            "111f68d31d1bdd714f9503bf5f4e162e0739c363e4ff2feef950d39e78266ffc",
        ),
        ("LICENSE", "fb50e42cb539382385f8d66572fef8ec08a34dd7dc00ba7a5ce0668d225dc35b"),
    ),
    # GX takes the filter-control stylesheets from the release before the rest.
    *_files(
        "bootstrap-table",
        "1.19.0",
        (
            "dist/extensions/filter-control/bootstrap-table-filter-control.css",
            "b3ff051168696ec9ae3cf8616c59a6db8734fb282863b23edfd8c0f93eb5c4f0",
        ),
        (
            "dist/extensions/filter-control/bootstrap-table-filter-control.min.css",
            "2c707bb54520737762a76f2238e87627993fb63bcef6d789a21a4957f393fa1c",
        ),
        ("LICENSE", "fb50e42cb539382385f8d66572fef8ec08a34dd7dc00ba7a5ce0668d225dc35b"),
    ),
    *_files(
        "bootstrap-datepicker",
        "1.9.0",
        (
            "dist/css/bootstrap-datepicker.min.css",
            "b22c8ea45fe905650f8087108b5ed32c1923bcd80d400adc9b0241f18be40208",
        ),
        (
            "dist/js/bootstrap-datepicker.min.js",
            "6ea55ea86749ee1fe560fabac6b3effd81b33046fa74dc657e24d41d28110a9f",
        ),
        ("LICENSE", "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"),
    ),
    *_files(
        "@forevolve/bootstrap-dark",
        "1.1.0",
        (
            "dist/css/bootstrap-prefers-dark.css",
            "b087541364cdc7e95cbf71be42da5259f3d11431cc84198c17b47cd44c87cd5b",
        ),
        ("LICENSE", "43be5d79d2ec3d6d876e1874d27506cbe55024b18afc55f1fc830aaaedc0313d"),
    ),
    # all.min.css loads the web fonts from ../webfonts/ (woff2, else ttf).
    *_files(
        "@fortawesome/fontawesome-free",
        "6.6.0",
        ("css/all.min.css", "e5e202e3c899507992952533f57b634722b69b34241d271963559d31aa33ef81"),
        (
            "webfonts/fa-brands-400.ttf",
            "bc844b5b02d3f3adabb514de4e0c0208252d3123413bd03f6287fa446acee859",
        ),
        (
            "webfonts/fa-brands-400.woff2",
            "c411f11975d26eb04cd2aa3c071181d4b18e489f1fb97060d4176a3531dfb36e",
        ),
        (
            "webfonts/fa-regular-400.ttf",
            "64f9fb623681f112261e9a2f97826782439f3925dea8f44a57d1e4db95ba6cfd",
        ),
        (
            "webfonts/fa-regular-400.woff2",
            "c732f106e91bc618767fbac8e2c7b27e5c736d477b2bb4fb83f597a43198c33c",
        ),
        (
            "webfonts/fa-solid-900.ttf",
            "31f099c13f6e4ba05f1b471bf170cb5493249474222917372de3ca5cf29e6a1a",
        ),
        (
            "webfonts/fa-solid-900.woff2",
            "1f0189e087fcefbf654fad74a3a06668b782c01353a61d5c0b7f0bf23e33c020",
        ),
        (
            "webfonts/fa-v4compatibility.ttf",
            "a6274a12fd3f5f1ea05fc9b4677959b31fd101fdac4f0d09c17159c414d36d23",
        ),
        (
            "webfonts/fa-v4compatibility.woff2",
            "2aca24b35bd41474dcc5e7fb5f11ec43fa06e3ac1d0035ad41108fa6b30b0871",
        ),
        ("LICENSE.txt", "9b914eae88817d63b576eab5aafde7068c7a1abae125d7cdfb034f1da43a9afc"),
    ),
    # GX asks for vega@5, vega-lite@5 and vega-embed@6: the newest release of each
    # major when vendored (vega-embed 6 wants vega ^5.21 and any vega-lite).
    *_files(
        "vega",
        "5.33.1",
        ("build/vega.min.js", "463f3db6a40b20e9747b4ed38f37ed0add508838f9141b1cf8366784b07b30c8"),
    ),
    *_files(
        "vega-lite",
        "5.23.0",
        (
            "build/vega-lite.min.js",
            "58c27358e26f2d319cf62f45bc17a4c8362f08645001df2ec8d341eee4097c7f",
        ),
        ("LICENSE", "f618900fd0d64046963b29f40590cdd1e341a2f41449f99110d82fd81fea808c"),
    ),
    *_files(
        "vega-embed",
        "6.29.0",
        (
            "build/vega-embed.min.js",
            "12d02acfbe3ec59ef9a37dd4822a2e04e2961b5bbb671bbe661d2221715b99da",
        ),
        ("LICENSE", "32df67148f0fc3db0eb9e263a7b75d07f1eb14c61955005a4a39c6918d10d137"),
    ),
)

#: Each CDN URL in GX's page templates -> the vendored file's `VendoredFile.local_path`.
CDN_FILES: dict[str, str] = {
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": (
        "bootstrap@4.3.1/dist/css/bootstrap.min.css"
    ),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": (
        "bootstrap@4.3.1/dist/js/bootstrap.min.js"
    ),
    "https://code.jquery.com/jquery-3.7.1.min.js": "jquery@3.7.1/dist/jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": (
        "popper.js@1.12.9/dist/umd/popper.min.js"
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": (
        "bootstrap-table@1.19.1/dist/bootstrap-table.min.css"
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": (
        "bootstrap-table@1.19.1/dist/bootstrap-table.min.js"
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js": (
        "bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js"
    ),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css": (
        "bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css"
    ),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css": (
        "bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css": (
        "bootstrap-datepicker@1.9.0/dist/css/bootstrap-datepicker.min.css"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js": (
        "bootstrap-datepicker@1.9.0/dist/js/bootstrap-datepicker.min.js"
    ),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css": (
        "@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": (
        "@fortawesome/fontawesome-free@6.6.0/css/all.min.css"
    ),
    # The package's "jsdelivr" entry point is what a bare package URL serves.
    "https://cdn.jsdelivr.net/npm/vega@5": "vega@5.33.1/build/vega.min.js",
    "https://cdn.jsdelivr.net/npm/vega-lite@5": "vega-lite@5.23.0/build/vega-lite.min.js",
    "https://cdn.jsdelivr.net/npm/vega-embed@6": "vega-embed@6.29.0/build/vega-embed.min.js",
}

#: GX's navbar logo (``<img src>``, with a ``?d=<render time>`` query); every
#: report carries GX's copy at ``static/images/logo-long.png``.
GX_LOGO_URL = "https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png"
_REPORT_LOGO = "static/images/logo-long.png"

_URL_ATTRIBUTE = re.compile(r'\b(?P<name>src|href)="(?P<url>https://[^"]*)"')


def localize_html(html: str, *, assets_url: str, docs_root_url: str) -> str:
    """``html`` with the known CDN URLs of ``src``/``href`` attributes replaced by local ones.

    ``assets_url`` is the URL of `URL_PATH` as seen from the page (relative, so
    any mount point works) and ``docs_root_url`` that of the report's
    ``data_docs/`` folder.  Other URLs (links to GX's website, an unknown CDN
    URL) are left alone.
    """

    def local(match: re.Match[str]) -> str:
        url = match.group("url")
        path = CDN_FILES.get(url)
        if path is not None:
            new = assets_url + path
        elif url == GX_LOGO_URL or url.startswith(GX_LOGO_URL + "?"):
            new = docs_root_url + _REPORT_LOGO
        else:
            return match.group(0)
        return f'{match.group("name")}="{new}"'

    return _URL_ATTRIBUTE.sub(local, html)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def verify(directory: Path = DIRECTORY) -> list[str]:
    """What is wrong with the vendored files under ``directory`` (missing or changed): [] if nothing."""
    problems = []
    for file in FILES:
        path = directory / file.local_path
        if not path.is_file():
            problems.append(f"{file.local_path}: missing")
        elif (digest := _sha256(path)) != file.sha256:
            problems.append(f"{file.local_path}: sha256 {digest}, expected {file.sha256}")
    return problems


def _vendor(directory: Path) -> int:
    """Fetch every package of `FILES` with ``npm pack``, copy its files in, check every sha256."""
    import shutil
    import subprocess
    import tarfile
    import tempfile

    packages = sorted({(f.package, f.version) for f in FILES})
    with tempfile.TemporaryDirectory(prefix="kfs-datadocs-") as tmp:
        for package, version in packages:
            out = subprocess.run(
                ["npm", "pack", "--silent", f"{package}@{version}", "--pack-destination", tmp],
                check=True,
                capture_output=True,
                text=True,
            )
            tarball = Path(tmp) / out.stdout.strip().splitlines()[-1]
            unpacked = Path(tmp) / f"{tarball.stem}-unpacked"
            with tarfile.open(tarball) as archive:
                archive.extractall(unpacked, filter="data")
            for file in FILES:
                if (file.package, file.version) == (package, version):
                    target = directory / file.local_path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(unpacked / "package" / file.path, target)
    problems = verify(directory)
    for problem in problems:
        print(problem)
    print(f"{len(FILES)} files of {len(packages)} npm packages in {directory}: ", end="")
    print("all match their sha256" if not problems else f"{len(problems)} do not match")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(_vendor(DIRECTORY))
