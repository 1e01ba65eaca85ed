"""The validation job's Data Docs site: GX's own pages, templates compiled once per process.

Great Expectations renders every Data Docs page through a new jinja
Environment, so each page compiles its templates again, and compiling is
most of what building this job's docs costs.  The views here are GX's page
views with one in-memory bytecode cache shared by all their environments:
`compile_templates` fills it (the validation job does that on a background
thread while Spark scans segments), and every page after that loads compiled
templates instead of compiling them.  The HTML is GX's, unchanged.

`site_config` names these views in a SiteBuilder config, the way GX's
SiteBuilder documents custom views (by module and class name).  Imported by
the driver only: it imports Great Expectations, which executors never need.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jinja2
from great_expectations.data_context.store.store import DataDocsSiteConfigTypedDict
from great_expectations.render.view.view import DefaultJinjaIndexPageView, DefaultJinjaPageView

from kfs_core.storage import ObjectStore

__all__ = [
    "CachedIndexPageView",
    "CachedPageView",
    "SiteConfig",
    "compile_templates",
    "site_config",
    "upload_site",
]

#: Driver threads uploading Data Docs files.
UPLOAD_THREADS = 8


class SiteConfig(DataDocsSiteConfigTypedDict):
    """GX's Data Docs site config with the section builders (which its TypedDict leaves out)."""

    site_section_builders: dict[str, Any]


class _MemoryBytecodeCache(jinja2.BytecodeCache):
    """Compiled templates by jinja's bucket key (template name and source checksum)."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


_CACHE = _MemoryBytecodeCache()


class CachedPageView(DefaultJinjaPageView):
    """GX's page view (suite and validation result pages), templates from `_CACHE`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env.bytecode_cache = _CACHE


class CachedIndexPageView(DefaultJinjaIndexPageView):
    """GX's index page view, templates from `_CACHE`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env.bytecode_cache = _CACHE


def site_config(base_directory: str) -> SiteConfig:
    """A SiteBuilder writing GX's default pages into ``base_directory`` with the cached views."""
    page = {"module_name": __name__, "class_name": CachedPageView.__name__}
    return {
        "class_name": "SiteBuilder",
        "site_index_builder": {
            "class_name": "DefaultSiteIndexBuilder",
            "view": {"module_name": __name__, "class_name": CachedIndexPageView.__name__},
        },
        "site_section_builders": {
            "expectations": {"view": page},
            "validations": {"view": page},
            "profiling": {"view": page},
        },
        "store_backend": {
            "class_name": "TupleFilesystemStoreBackend",
            "base_directory": base_directory,
        },
    }


def compile_templates() -> None:
    """Compile every GX page template into the shared cache (once per process)."""
    env = CachedPageView().env
    for name in env.list_templates(filter_func=lambda n: n.endswith(".j2")):
        env.get_template(name)


def upload_site(store: ObjectStore, prefix: str, docs_dir: Path) -> str | None:
    """Put every Data Docs file of ``docs_dir`` under ``prefix``; the index.html key.

    The pages and assets go up on a few threads (each put is a round trip,
    and fsyncs on a local store); ``index.html`` goes last, once everything
    it links to is there.
    """
    files = {p.relative_to(docs_dir).as_posix(): p for p in docs_dir.rglob("*") if p.is_file()}
    index_page = files.pop("index.html", None)

    def put(relative: str) -> None:
        store.put(prefix + relative, files[relative].read_bytes())

    with ThreadPoolExecutor(UPLOAD_THREADS, thread_name_prefix="kfs-docs") as pool:
        list(pool.map(put, sorted(files)))
    if index_page is None:
        return None
    store.put(prefix + "index.html", index_page.read_bytes())
    return prefix + "index.html"
