"""Which source a case comes from: the unit the corpus's errors are measured by leaving out.

Cases from one publisher's page, post, thread or results file share their setup (the same engine build, flags,
client and hands), so leaving one of them out while its siblings stay in tells little about the next deployment.
A case's source id is its URL without what does not name another document: scheme, a `www.`, the query, the
fragment (an issue comment's anchor is its thread), a trailing slash or `index.html`; on GitHub the ref of a
file (a commit or branch names a version of one file, not another source) and the sub-page of an issue or pull
request (`/files`, `/commits`). A case file names `source_id` itself only where two URLs are truly one source.

The id is then said short, as a reader names a source: a GitHub thread as `owner/repo#N`, a file on GitHub as
`owner/repo:name`, any other page as its site (the domain's name: `gpustack`, `lmsys`) and the last two segments of
its path that are not bare numbers (a blog's date folders). Two pages whose short ids meet are counted as one
source, which leaves more out together, never less (`validate --json` carries an id per case, and the corpus's
document must stay small enough to pass whole).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_GITHUB_FILE = re.compile(r"^/([^/]+)/([^/]+)/(?:blob|tree|raw)/[^/]+/(.+)$")
_GITHUB_THREAD = re.compile(r"^/([^/]+)/([^/]+)/(?:issues|pull|discussions)/(\d+)(?:/.*)?$")


def source_id(url: str) -> str:
    """The source a URL names, e.g. `github.com/sgl-project/sglang/issues/870` for any comment of that thread."""
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower().removeprefix("www.")
    path = re.sub(r"/+", "/", parts.path)
    path = re.sub(r"/index\.html?$", "", path).rstrip("/")
    if host == "raw.githubusercontent.com":  # /owner/repo/<ref>/path: the file on GitHub
        owner_repo_ref_path = path.split("/", 4)
        if len(owner_repo_ref_path) == 5:
            host, path = "github.com", "/" + "/".join([*owner_repo_ref_path[1:3], "blob", *owner_repo_ref_path[3:]])
    if host == "github.com":  # owner and repo are case-blind, a file's name is not
        if m := _GITHUB_THREAD.match(path):
            return f"{m.group(1).lower()}/{m.group(2).lower()}#{m.group(3)}"
        if m := _GITHUB_FILE.match(path):
            return f"{m.group(1).lower()}/{m.group(2).lower()}:{m.group(3).rsplit('/', 1)[-1]}"
    labels = host.split(".")
    site = labels[-2] if len(labels) > 1 else host
    segments = [x for x in re.sub(r"\.html?$", "", path).split("/") if x and not x.isdigit()]
    return "/".join([site, *segments[-2:]])
