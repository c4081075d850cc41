"""A failed re-train's model is put back in one rename (rnnfleet.hooks.atomic_restore): a
file identical to its backup is left alone, any other replaced whole, through Snakemake's own
backup and restore calls once the hook is applied."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rnnfleet.hooks import atomic_restore


def test_an_identical_file_is_left_alone(tmp_path):
    backup, path = tmp_path / "backup.pt", tmp_path / "model.pt"
    backup.write_bytes(b"weights")
    path.write_bytes(b"weights")
    inode = path.stat().st_ino
    atomic_restore.put_back(backup, path)
    assert path.stat().st_ino == inode and path.read_bytes() == b"weights"


def test_another_file_is_replaced_in_one_rename(tmp_path):
    backup, path = tmp_path / "backup.pt", tmp_path / "models" / "model.pt"
    backup.write_bytes(b"old weights")
    path.parent.mkdir()
    path.write_bytes(b"half a new fi")
    inode = path.stat().st_ino
    atomic_restore.put_back(backup, path)
    assert path.read_bytes() == b"old weights" and path.stat().st_ino != inode
    assert sorted(os.listdir(path.parent)) == ["model.pt"]  # no staging file left


def test_snakemake_restores_through_the_hook(tmp_path, monkeypatch):
    import snakemake.api  # noqa: F401  (imports snakemake.persistence in the order it needs)
    from snakemake.persistence import FileBackupMixin, PersistenceBase

    for owner, name in ((FileBackupMixin, "restore_output"), (FileBackupMixin, "backup_output")):
        monkeypatch.setattr(owner, name, getattr(owner, name))
    monkeypatch.setattr(PersistenceBase, "finished", PersistenceBase.finished)
    atomic_restore.apply()
    assert FileBackupMixin.restore_output is atomic_restore.restore_output

    monkeypatch.chdir(tmp_path)
    persistence = FileBackupMixin()
    persistence.path = Path(".snakemake")
    model = Path("models/A_1m.pt")
    model.parent.mkdir()
    model.write_bytes(b"previous model")
    persistence.backup_output(model)
    inode = model.stat().st_ino
    assert persistence.restore_output(model) is True  # the job failed before replacing it
    assert model.stat().st_ino == inode and model.read_bytes() == b"previous model"
    assert not persistence._get_backup_path(model).exists()

    persistence.backup_output(model)
    model.unlink()
    assert persistence.restore_output(model) is True  # gone: put back whole
    assert model.read_bytes() == b"previous model"


def test_a_folder_is_put_back_whole_and_never_missing_while_copied(tmp_path, monkeypatch):
    curves, backup = tmp_path / "loss_curves", tmp_path / "backup"
    backup.mkdir()
    (backup / "A_1m.svg").write_text("previous curve")
    curves.mkdir()
    (curves / "A_1m.svg").write_text("half-drawn")
    (curves / "B_1m.svg").write_text("drawn by the failed job")
    copied_while = []
    stock_copy = shutil.copytree

    def watching_copy(source, target, **kwargs):
        copied_while.append(sorted(path.name for path in curves.iterdir()))
        return stock_copy(source, target, **kwargs)

    monkeypatch.setattr(shutil, "copytree", watching_copy)
    assert atomic_restore.put_back_folder(backup, curves)
    assert copied_while == [["A_1m.svg", "B_1m.svg"]]  # the folder was whole while the copy was made
    assert {path.name: path.read_text() for path in curves.iterdir()} == {"A_1m.svg": "previous curve"}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["backup", "loss_curves"]  # nothing left over
