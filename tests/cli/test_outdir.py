"""``--out`` is published in one step: a staged folder renamed (or swapped) into place, nothing left behind."""

from __future__ import annotations

import pytest

from dphypo.cli.outdir import check_out_is_free, publish, staging_folder


def _staged(out, text: str):
    staging = staging_folder(out)
    for name in ("released_model.pt", "released_model.json", "release.json"):
        (staging / name).write_text(f"{text} {name}")
    return staging


@pytest.mark.parametrize("before", ["missing", "empty", "a release", "shared with other files"])
def test_publish_puts_the_whole_release_in_place_and_leaves_no_temporary_folder(tmp_path, before) -> None:
    out = tmp_path / "out"
    if before != "missing":
        out.mkdir()
    if before == "a release":
        for name in ("released_model.pt", "release.json"):
            (out / name).write_text("old")
    if before == "shared with other files":
        (out / "notes.txt").write_text("the user's")
        (out / "release.json").write_text("old")
    publish(_staged(out, "new"), out)
    assert (out / "release.json").read_text() == "new release.json"
    assert (out / "released_model.pt").read_text() == "new released_model.pt"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging or replaced folder left
    if before == "shared with other files":
        assert (out / "notes.txt").read_text() == "the user's"


def test_a_leftover_staging_folder_is_never_published_and_is_replaced(tmp_path) -> None:
    out = tmp_path / "out"
    leftover = _staged(out, "killed")  # a save killed before publish: --out was never touched
    (leftover / "release.json").unlink()
    assert not out.exists()
    check_out_is_free(out, None)
    publish(_staged(out, "new"), out)
    assert (out / "release.json").read_text() == "new release.json" and not leftover.exists()


def test_an_out_holding_a_release_is_refused_without_the_journal_that_made_it(tmp_path) -> None:
    out = tmp_path / "out"
    publish(_staged(out, "one"), out)
    with pytest.raises(ValueError, match="without --journal this run cannot tell"):
        check_out_is_free(out, None)
    with pytest.raises(ValueError, match=r"another search .*has released nothing yet"):
        check_out_is_free(out, str(tmp_path / "new.db"))
