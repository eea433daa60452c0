"""Hub sources: the ``hf://`` text that names a file in a Hugging Face Hub repository.

``hub_source`` writes it (the ``source`` of Hub events and of ``Model.source``),
``parse_hub_source`` reads it back, and the ``validate_*`` checks of repository ids, file
names and revisions run before any request, so that a bad name is a ``ValueError`` naming the
bad part, never a path outside the cache or a request the Hub refuses. The fetching is in
``hub.py``, the cache on disk in ``hub_cache.py``.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

__all__ = [
    "HubSource",
    "hub_source",
    "parse_hub_source",
    "validate_filename",
    "validate_repo_id",
    "validate_revision",
]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_REPO_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


class HubSource(NamedTuple):
    """A model file in a Hub repository, as a Hub source names it."""

    repo_id: str
    filename: str
    revision: str | None = None  # named in the source ('@v1'); None: the load's revision


# hf://<id>@<revision>[/<path>] (huggingface_hub's HF URI grammar): '@' ends the id; the
# revision is quoted ('refs%2Fpr%2F1') or one of the Hub's refs/pr/N, refs/convert/NAME
_WITH_REVISION = re.compile(
    r"hf://(?P<id>[^/@]+(?:/[^/@]+)?)@(?P<rev>refs/pr/\d+|refs/convert/\w+|[^/]*)(?:/(?P<path>.*))?",
    re.S,
)


def hub_source(
    repo_id: str, path: str | None = None, revision: str = "main", *, with_revision: bool = False
) -> str:
    """The text form of a Hub file (of the repository without ``path``): the ``source`` of
    Hub events and of ``Model.source``.

    ``hf://owner/name/path/in/repo``, in the grammar of huggingface_hub's HF URIs
    (``hf://<id>[@<revision>][/<path>]``). The revision (quoted) is written
    ``with_revision``, and always after a one-part id (``gpt2``):
    ``hf://gpt2@main/onnx/model.onnx``, because only the '@' says where such an id ends
    (``hf://gpt2/onnx/model.onnx`` reads as the repository ``gpt2/onnx``).
    ``parse_hub_source`` reads every form back, as does the ``hub_files`` view.
    """
    root = f"hf://{repo_id}"
    if with_revision or "/" not in repo_id:
        root += "@" + quote(revision, safe="")
    return root if path is None else f"{root}/{path}"


def parse_hub_source(source: Any) -> HubSource | None:
    """The repository, file and revision of a Hub source; ``None`` for anything else.

    Hub sources are ``"hf://owner/repo/path/in/repo.onnx"``, with a revision
    ``"hf://owner/repo@v1/path/in/repo.onnx"`` (a one-part id needs it:
    ``"hf://gpt2@main/model.onnx"``), and ``("hf", repo_id, file)``.
    The repository id, file name and revision are validated here, before any request: a
    ``ValueError`` names the bad part.
    """
    revision = None
    if isinstance(source, str):
        if not source.startswith("hf://"):
            return None
        tagged = _WITH_REVISION.fullmatch(source)
        if tagged is not None:
            repo_id, filename = tagged["id"], tagged["path"] or ""
            revision = unquote(tagged["rev"])
            validate_revision(revision)
        else:
            parts = source[len("hf://") :].split("/", 2)
            if len(parts) < 3 or not parts[2]:
                parts = [*parts, "", ""]
            repo_id, filename = f"{parts[0]}/{parts[1]}", parts[2]
        if not filename:
            raise ValueError(
                f"Hub source {source!r}: give the repository and the file, "
                "as 'hf://owner/repo/path/in/repo.onnx' (a revision: 'hf://owner/repo@v1/...')"
            )
    elif isinstance(source, (tuple, list)) and source and source[0] == "hf":
        if len(source) != 3 or not all(isinstance(p, str) for p in source):
            raise ValueError(
                f"Hub source {source!r}: give ('hf', 'owner/repo', 'path/in/repo.onnx')"
            )
        repo_id, filename = source[1], source[2]
    else:
        return None
    validate_repo_id(repo_id)
    validate_filename(filename)
    return HubSource(repo_id, filename, revision)


def _check_text(value: Any, what: str, give: str, *, backslash_hint: str = "") -> None:
    """What a repository id and a file name share: a non-empty string without control
    characters or backslashes; ``give`` says what to give instead of an empty one."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"Hub {what} {value!r}: {give}")
    if _CONTROL.search(value):
        raise ValueError(f"Hub {what} {value!r} contains a control character")
    if "\\" in value:
        raise ValueError(f"Hub {what} {value!r} contains a backslash{backslash_hint}")


def validate_repo_id(repo_id: str) -> None:
    """Raise ``ValueError`` unless ``repo_id`` is ``name`` or ``owner/name`` as the Hub allows."""
    _check_text(repo_id, "repository id", "give 'owner/repo'")
    parts = repo_id.split("/")
    if len(parts) > 2:
        raise ValueError(f"Hub repository id {repo_id!r}: has more than 'owner/repo'")
    for part in parts:
        if part in ("", ".", ".."):
            raise ValueError(f"Hub repository id {repo_id!r}: the part {part!r} is not a name")
        if not _REPO_PART.fullmatch(part) or ".." in part or "--" in part:
            raise ValueError(
                f"Hub repository id {repo_id!r}: the part {part!r} may only use letters, "
                "digits, '-', '_' and '.', start with a letter or digit, and not contain "
                "'--' or '..'"
            )
    if len(repo_id) > 96:
        raise ValueError(f"Hub repository id {repo_id!r} is longer than 96 characters")


def validate_filename(filename: str, *, what: str = "file name") -> None:
    """Raise ``ValueError`` unless ``filename`` is a plain relative path inside a repository."""
    _check_text(
        filename,
        what,
        "give the path of the file in the repository",
        backslash_hint="; use '/' between folders",
    )
    if filename.startswith("/") or re.match(r"[A-Za-z]:", filename):
        raise ValueError(
            f"Hub {what} {filename!r} is an absolute path; give it relative to the repo"
        )
    for part in filename.split("/"):
        if part in ("", ".", ".."):
            raise ValueError(
                f"Hub {what} {filename!r}: the part {part!r} is not allowed; give a plain "
                "path inside the repository, such as 'onnx/model.onnx'"
            )


def validate_revision(revision: str) -> None:
    """Raise ``ValueError`` for a revision that could not name a branch, tag or commit."""
    if not isinstance(revision, str) or not revision:
        raise ValueError(f"Hub revision {revision!r}: give a branch, a tag or a commit hash")
    if _CONTROL.search(revision) or "\\" in revision:
        raise ValueError(f"Hub revision {revision!r} contains a control character or backslash")
    if revision.startswith("/") or any(p in ("", ".", "..") for p in revision.split("/")):
        raise ValueError(f"Hub revision {revision!r} is not a branch, tag or commit name")
