"""The report page's own HTML, CSS and JavaScript (no library, no network), kept as package
data beside this module (page.html, page.css, page.js); html.py fills in the profile as JSON.

Views, one function each in page.js: flame graph (icicle), kernels table, roofline, source
heat, findings. Hash options (links between views, and tests): #view=flame|kernels|roofline|
source|findings|warps, #zoom=FRAME, #sort=COLUMN:asc|desc, #search=TEXT, #kernel=NAME (the kernel
marked in the table and the roofline, shown in the source view), #sandwich=NAME (a function's
callers and callees in the flame tab), #warp=K (the Warps tab's kernel).
"""
from __future__ import annotations

from functools import lru_cache
from importlib.resources import files


@lru_cache(maxsize=1)
def template() -> str:
    """The page with `__TITLE__` and `__DATA__` left to fill in."""
    here = files(__package__)
    html, css, js = ((here / f"page.{ext}").read_text(encoding="utf-8")
                     for ext in ("html", "css", "js"))
    return html.replace("/*__CSS__*/", css).replace("/*__JS__*/", js)
