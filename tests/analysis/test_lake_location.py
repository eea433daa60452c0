"""A lake given as a URI is never a local folder (issue 53: `--lake s3://...` made `s3:/`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ember.analysis.lake import LakeError, connect_lake, ingest_lake
from ember.analysis.lake.location import lake_location, local_lake_path
from ember.cli.app import app


def test_locations_parse(tmp_path: Path) -> None:
    assert lake_location(tmp_path).path == tmp_path.resolve()
    assert lake_location(tmp_path.as_uri()).path == tmp_path.resolve()
    s3 = lake_location("s3://bucket/ember")
    assert (s3.scheme, s3.uri, s3.path) == ("s3", "s3://bucket/ember", None)
    # what a pathlib.Path option makes of the URI
    assert lake_location(Path("s3://bucket/ember")).uri == "s3://bucket/ember"
    assert lake_location("abfss://c@acct.dfs.core.windows.net/p").scheme == "abfss"
    with pytest.raises(LakeError, match="unknown lake URI scheme ftp://"):
        lake_location("ftp://host/lake")


def test_uri_lake_makes_no_local_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    with pytest.raises(LakeError, match="s3://bucket/ember"):
        ingest_lake([trace], "s3://bucket/ember")
    with pytest.raises(LakeError, match="s3://bucket/ember"):
        connect_lake("s3://bucket/ember")
    with pytest.raises(LakeError):
        local_lake_path("gs://b/p")
    result = CliRunner().invoke(app, ["ingest", str(trace), "--lake", "s3://bucket/ember"])
    assert result.exit_code != 0
    assert not (tmp_path / "s3:").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]
