"""Output paths are checked before any work (lightning_edge.cli.check_output_paths): a file option given a folder
or a missing folder is refused; a folder option (the demo's --out) accepts a folder, existing or creatable."""

from __future__ import annotations

import argparse
import os

import pytest

from lightning_edge.cli import check_output_paths


def _ns(**kw) -> argparse.Namespace:
    return argparse.Namespace(**kw)


def test_a_file_option_refuses_a_folder_and_a_missing_folder(tmp_path):
    with pytest.raises(ValueError, match="is a folder; give a file name"):
        check_output_paths(_ns(out=str(tmp_path)))
    with pytest.raises(ValueError, match="does not exist"):
        check_output_paths(_ns(json=str(tmp_path / "no" / "x.json")))
    check_output_paths(_ns(json=str(tmp_path / "x.json"), plot=None, out="-"))  # fine


def test_a_folder_option_takes_an_existing_or_creatable_folder_but_not_a_file(tmp_path):
    check_output_paths(_ns(out=str(tmp_path), folder_outputs=("out",)))  # a second demo run reuses its folder
    check_output_paths(_ns(out=str(tmp_path / "a" / "b"), folder_outputs=("out",)))  # created later
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="is a file; give a folder"):
        check_output_paths(_ns(out=str(f), folder_outputs=("out",)))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_a_folder_option_in_a_read_only_place_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ValueError, match="not a writable folder"):
            check_output_paths(_ns(out=str(ro / "demo"), folder_outputs=("out",)))
    finally:
        ro.chmod(0o700)


def test_json_at_a_device_a_link_or_an_unrelated_file_is_refused_before_any_work(tmp_path, capsys):
    """Issue 36 item 3: every file the tool writes goes through one writer; --json PATH at a character device, a
    symbolic link or a file that is not JSON is refused in one line (was: written into, followed, overwritten)."""
    import os
    import stat

    from lightning_edge.cli import main as cli_main

    dev = tmp_path / "null"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = tmp_path / "out.json"
    link.symlink_to(victim)
    notes = tmp_path / "notes.json"
    notes.write_text("my notes")
    for dest, what in ((dev, "is a device"), (link, "is a symbolic link"), (notes, "is not a JSON file")):
        assert cli_main(["mode", "list", "--device", "sim:orin-agx", "--json", str(dest)]) == 1
        err = capsys.readouterr().err
        assert what in err and len(err.strip().splitlines()) == 1, err
    assert stat.S_ISCHR(os.lstat(dev).st_mode) and link.is_symlink() and victim.read_text() == "precious"
    assert notes.read_text() == "my notes"
    good = tmp_path / "modes.json"
    assert cli_main(["mode", "list", "--device", "sim:orin-agx", "--json", str(good)]) == 0
    assert cli_main(["mode", "list", "--device", "sim:orin-agx", "--json", str(good)]) == 0  # its own file: replaced


def test_a_reader_that_goes_away_early_gets_no_traceback():
    """``lightning-edge mode list | head -2``: the pipe closes while the command still writes; it ends quietly, with
    the shell's status for a closed pipe (was: a BrokenPipeError traceback)."""
    import subprocess
    import sys

    cmd = [sys.executable, "-c", "import sys; from lightning_edge.cli import main; sys.exit(main())",
           "mode", "list", "--device", "sim:orin-agx"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader goes away before the command writes
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 141 and "Traceback" not in err and "BrokenPipe" not in err, err
