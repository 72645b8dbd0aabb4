"""Output paths are proven writable (a probe file) before a search spends its budget; nothing is left behind."""

from __future__ import annotations

import os

import pytest

from dphypo._paths import check_output_dir, check_output_file


def _tree(root) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), root) for d, ds, fs in os.walk(root) for n in ds + fs}


def test_a_creatable_folder_passes_and_leaves_nothing_behind(tmp_path) -> None:
    before = _tree(tmp_path)
    assert check_output_dir(tmp_path / "a" / "b" / "c", "--out") == tmp_path / "a" / "b" / "c"
    check_output_file(tmp_path / "x" / "y.npz", "--out", create_parents=True)
    check_output_file(tmp_path / "j.db", "--journal")
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "afile" / "sub", "afile' is a file"),  # a file where a folder is expected
        (lambda d: d / "afile", "is a file"),
        (lambda d: "", "must name a path"),
        (lambda d: "/proc/dphypo-probe", "cannot be written"),  # a virtual file system refuses new entries
    ],
    ids=["under-a-file", "a-file", "empty", "proc"],
)
def test_an_unusable_folder_is_refused_naming_the_option(tmp_path, make, message: str) -> None:
    (tmp_path / "afile").write_text("")
    with pytest.raises(ValueError, match=message) as err:
        check_output_dir(make(tmp_path), "--out")
    assert str(err.value).startswith("--out")


def test_a_file_in_a_missing_or_unwritable_folder_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"--journal .*nodir' does not exist"):
        check_output_file(tmp_path / "nodir" / "j.db", "--journal")
    with pytest.raises(ValueError, match=r"--journal '/proc/j\.db' cannot be written"):
        check_output_file("/proc/j.db", "--journal")
    (tmp_path / "adir").mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        check_output_file(tmp_path / "adir", "--journal")
    existing = tmp_path / "kept.db"
    existing.write_bytes(b"data")
    check_output_file(existing, "--journal")  # an existing file is checked, never changed
    assert existing.read_bytes() == b"data"
