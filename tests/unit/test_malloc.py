"""catcap.malloc: the catcap commands raise glibc's malloc thresholds unless CATCAP_MALLOC=system;
a wrong value is refused before anything runs, saying what is allowed."""

from __future__ import annotations

import platform

import pytest

from catcap.cli.main import main
from catcap.malloc import _glibc, keep_freed_memory


def test_system_leaves_the_defaults_and_catcap_applies_on_glibc():
    assert keep_freed_memory("system") is False
    applied = keep_freed_memory("catcap")
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert _glibc() is not None and applied is True
    else:
        assert applied is False


def test_a_wrong_choice_is_refused_with_the_fix(monkeypatch, capsys):
    with pytest.raises(ValueError, match="CATCAP_MALLOC must be one of catcap, system, got 'fast'"):
        keep_freed_memory("fast")
    monkeypatch.setenv("CATCAP_MALLOC", "fast")
    assert main(["zoo", "list"]) == 2
    err = capsys.readouterr().err
    assert "CATCAP_MALLOC must be one of catcap, system" in err and "CATCAP_MALLOC=system" in err
