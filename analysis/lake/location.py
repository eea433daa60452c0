"""Where a lake is: a local folder or an object-store URI, told apart once.

``lake_location`` parses what a user gave as a lake (``--lake``, ``--db``, the API's
``lake``): a local path, a ``file://`` URI, or an object-store URI (``s3://``, ``gs://``,
``az://``, ``abfss://``, ...). ``local_lake_path`` is what the entry points that read and
write a lake folder call: an object-store URI or an unknown scheme is a ``LakeError``, never
a local folder named ``s3:`` (``Path("s3://b/p")`` is ``s3:/b/p``, so the one-slash form a
``pathlib.Path`` option makes of a URI is recognised too).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ember.analysis.lake.table import LakeError

OBJECT_STORE_SCHEMES = frozenset({"s3", "s3a", "gs", "az", "abfs", "abfss", "adl", "azure"})
"""The URI schemes of the object stores delta-rs writes to."""

# a scheme of two or more characters (``C:\`` stays a Windows drive), then ``:/``
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/")


@dataclass(frozen=True)
class LakeLocation:
    """A lake's place: ``path`` for a local folder, else ``uri`` on an object store."""

    uri: str
    scheme: str  # "file" for a local folder
    path: Path | None

    @property
    def is_local(self) -> bool:
        return self.path is not None

    def __str__(self) -> str:
        return str(self.path) if self.path is not None else self.uri


def lake_location(lake: str | os.PathLike[str] | LakeLocation) -> LakeLocation:
    """Parse a lake given as a path or a URI; ``LakeError`` for an unknown scheme."""
    if isinstance(lake, LakeLocation):
        return lake
    text = os.fspath(lake)
    found = _URI.match(text)
    if found is None:
        path = Path(text).expanduser().resolve()
        return LakeLocation(path.as_uri(), "file", path)
    scheme = found.group(1).lower()
    if scheme == "file":
        path = Path(unquote(urlsplit(text).path)).resolve()
        return LakeLocation(path.as_uri(), "file", path)
    # a pathlib.Path made "s3://b/p" into "s3:/b/p": put the second slash back
    rest = text[len(scheme) + 1 :]
    uri = text if rest.startswith("//") else f"{scheme}:/{rest}"
    if scheme not in OBJECT_STORE_SCHEMES:
        known = ", ".join(f"{s}://" for s in sorted(OBJECT_STORE_SCHEMES | {"file"}))
        raise LakeError(
            f"{uri}: unknown lake URI scheme {scheme}://; give a folder or one of {known}"
        )
    return LakeLocation(uri, scheme, None)


def local_lake_path(lake: str | os.PathLike[str] | LakeLocation) -> Path:
    """The lake's local folder; ``LakeError`` for an object-store URI, which this entry
    point does not read or write yet (nothing is made on local disk for it)."""
    loc = lake_location(lake)
    if loc.path is None:
        raise LakeError(
            f"{loc.uri}: lakes on object storage ({loc.scheme}://) are not supported by this "
            "command yet; give a local or shared folder as the lake"
        )
    return loc.path
