"""A full disk and a read-only run directory: a clear error, no traceback, every earlier checkpoint
loadable, and the same command resumes once there is room.

The faults are real: each run gets a small tmpfs of its own in a private mount namespace
(``unshare``), full or remounted read-only, which disappears when the run ends.
"""

import os
import subprocess
import sys
from pathlib import Path

from selfverify.loop import main
from selfverify.runtime.checkpoint import load_bundle
from selfverify.utils.tracking import read_metrics


def _in_tmpfs(script: str, size: str, out: Path) -> None:
    """Run ``script`` (sh) with a fresh tmpfs of ``size`` mounted at $MNT; $OUT (``out``) is on the
    ordinary disk, for what the test looks at after the namespace is gone; $PY is this Python."""
    mnt = out / "mnt"
    mnt.mkdir(parents=True)
    body = f'mount -t tmpfs -o size={size} tmpfs "$MNT"\n{script}'
    env = {**os.environ, "MNT": str(mnt), "OUT": str(out), "PY": sys.executable}
    namespace = ["unshare", "--mount", "--map-root-user"]
    subprocess.run([*namespace, "sh", "-ec", body], env=env, check=True, timeout=600)


def _loop(overrides: list[str], run: str = "run", tag: str = "") -> str:
    """The shell command running the loop on $MNT/<run>, its stderr and exit code kept in $OUT."""
    args = " ".join(["--no-progress", *overrides])
    command = f'$PY -m selfverify.loop --run-dir "$MNT/{run}" {args} 2> "$OUT/stderr{tag}"'
    return f'set +e\n{command}\necho $? > "$OUT/rc{tag}"\nset -e\n'


def test_a_full_disk_stops_with_a_clear_error_and_the_run_resumes(tmp_path, tiny_overrides, tiny_loop):
    overrides = [*tiny_overrides, *tiny_loop]
    # Room for one checkpoint but not for two: the first save (the generator part-way through its cold
    # start) fits, the next one (written beside it, then swapped in) fills the disk while writing.
    _in_tmpfs(_loop(overrides) + 'cp -a "$MNT/run" "$OUT/run"\n', "200k", tmp_path)
    stderr = (tmp_path / "stderr").read_text()
    assert (tmp_path / "rc").read_text().strip() == "2"
    assert "Traceback" not in stderr
    message = " ".join(stderr.split())
    assert "could not write the checkpoint" in message and "No space left on device" in message
    ckpt = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in ckpt.iterdir()) == ["latest"]  # the partial copy is gone
    models, _, state = load_bundle(ckpt / "latest")
    # Saved inside the generator's cold start, with its optimizer: the resumed run goes on from there.
    assert set(models) == {"generator"} and (state["phase"], state["step"] > 0) == ("cold_start", True)
    # With room again, the same command resumes to the result of a run that never stopped.
    assert main(["--run-dir", str(tmp_path / "run"), "--no-progress", *overrides]) == 0
    assert main(["--run-dir", str(tmp_path / "whole"), "--no-progress", *overrides]) == 0
    assert read_metrics(tmp_path / "run") == read_metrics(tmp_path / "whole")


def test_a_read_only_run_directory_is_a_clear_error_and_changes_nothing(tmp_path, tiny_overrides, tiny_loop):
    overrides = [*tiny_overrides, *tiny_loop, "loop.rounds=0"]
    assert main(["--run-dir", str(tmp_path / "done"), "--no-progress", *overrides]) == 0
    # Resuming it on a read-only file system (a copy of it), then starting a new run there.
    script = f'cp -a "{tmp_path / "done"}" "$MNT/run"\nmount -o remount,ro "$MNT"\n' + _loop(overrides)
    script += 'cp -a "$MNT/run" "$OUT/after"\n' + _loop(overrides, run="new", tag="-new")
    _in_tmpfs(script, "10m", tmp_path)
    for suffix in ("", "-new"):
        assert (tmp_path / f"rc{suffix}").read_text().strip() == "2"
        stderr = " ".join((tmp_path / f"stderr{suffix}").read_text().split())
        assert "Traceback" not in stderr and "cannot write the run directory" in stderr
        assert "Read-only file system" in stderr
    before = sorted(p.relative_to(tmp_path / "done") for p in (tmp_path / "done").rglob("*"))
    after = sorted(p.relative_to(tmp_path / "after") for p in (tmp_path / "after").rglob("*"))
    assert before == after
    assert load_bundle(tmp_path / "after" / "checkpoints" / "latest")[2]["phase"] == "done"
