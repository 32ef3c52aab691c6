"""The one loader of Proton's C helpers (cupti/c_loader.py): cupti/native.c, cupti/pm_native.c
and runtime/intra_native.c, each a .c file of its package, built at first use into a private
cache keyed by its source, the flags, the compiler and Python's ABI; a library another user
could have placed is never loaded, and without a compiler Python does the work, said once."""
from __future__ import annotations

import ctypes
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile

import pytest

from proton.cupti import c_loader, native, pm_native
from proton.runtime import intra_native

HELPERS = {"native": native, "pm": pm_native, "intra": intra_native}
"""Each helper's module: helper() gives its library, HELPER its loader."""
FALLBACKS = {"native": "reading CUPTI buffers in Python", "pm": "reading counter samples in Python",
             "intra": "decoding kernel scope buffers in numpy"}
NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root to act as a second user (uid 65534)")
needs_cc = pytest.mark.skipif(c_loader.compiler() is None,
                              reason="no C compiler (cc, gcc, clang or CC)")


@pytest.fixture
def fresh(monkeypatch):
    """Every helper loaded anew (as in a new process), PROTON_NATIVE unset."""
    monkeypatch.delenv(c_loader.NATIVE_ENV, raising=False)

    def forget():
        for module in HELPERS.values():
            module.HELPER.built.clear()
        c_loader._compiler_file.cache_clear()

    forget()
    yield
    forget()


@pytest.fixture
def shared(monkeypatch):
    """A folder under /tmp that anyone may write (no sticky bit), the cache's parent: a
    second user can place what she likes in it."""
    folder = tempfile.mkdtemp(prefix="proton-shared-cache-")
    os.chmod(folder, 0o777)
    monkeypatch.setenv("PROTON_CACHE_DIR", folder)
    yield folder
    shutil.rmtree(folder)


def as_nobody(*command: str) -> None:
    subprocess.run(command, user=NOBODY, group=NOBODY, extra_groups=[], check=True, timeout=60)


def test_each_helpers_c_is_a_c_file_of_its_package_and_types_its_functions():
    """Item 61.2: no C in Python strings; each helper's exported functions are typed from
    their PROTON_API definitions (pm's and intra's as they were typed by hand)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ptr, size, i64, i32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64, ctypes.c_int32
    for name, module in HELPERS.items():
        loader = module.HELPER
        assert loader.source_name.endswith(".c")
        on_disk = os.path.join(os.path.dirname(module.__file__), loader.source_name)
        with open(on_disk) as f:
            assert f.read() == loader.source, name
        with open(module.__file__) as f:
            assert "#include" not in f.read(), f"{name}: C left in its Python module"
    assert pm_native.HELPER.signatures() == {"proton_pm_read": (
        ctypes.c_int, [ptr, ptr, ptr, ptr, ptr, size, ptr, size, size, size, ptr, ptr, ptr])}
    assert intra_native.HELPER.signatures() == {
        "proton_intra_bound": (i64, [ptr, ptr, ptr, i64, i64, i32, ptr, i32]),
        "proton_intra_decode": (None, [ptr, ptr, ptr, i64, i64, i32, ptr, i32, ptr, i64, ptr,
                                       ptr, ptr, ptr])}


@needs_cc
def test_the_cache_key_follows_the_compiler_and_pythons_abi(tmp_path, monkeypatch, fresh):
    """A library built by another compiler (CC, or cc upgraded in place) or for another
    Python ABI is never loaded: each gets a name of its own, and the compiler named is the
    one that builds."""
    monkeypatch.setenv("PROTON_CACHE_DIR", str(tmp_path / "cache"))
    default = {name: m.HELPER.path() for name, m in HELPERS.items()}
    log = tmp_path / "calls"
    wrapper = tmp_path / "my-cc"
    wrapper.write_text(f"#!/bin/sh\necho built >> {log}\nexec {c_loader.compiler()} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    swapped = {name: m.HELPER.path() for name, m in HELPERS.items()}
    assert all(swapped[name] != default[name] for name in HELPERS), (default, swapped)
    assert pm_native.helper() is not None and log.read_text() == "built\n"
    assert os.path.exists(swapped["pm"])

    wrapper.write_text(wrapper.read_text() + "# 13.1\n")  # upgraded in place
    c_loader._compiler_file.cache_clear()  # as a new process would
    upgraded = {name: m.HELPER.path() for name, m in HELPERS.items()}
    assert all(upgraded[name] != swapped[name] for name in HELPERS)

    monkeypatch.delenv("CC")
    real = sysconfig.get_config_var
    monkeypatch.setattr(sysconfig, "get_config_var", lambda name: ".cpython-399-x86_64.so"
                        if name == "EXT_SUFFIX" else real(name))
    assert all(m.HELPER.path() != default[name] for name, m in HELPERS.items())


def test_without_a_compiler_every_helper_falls_back_and_says_so_once(tmp_path, monkeypatch,
                                                                     capfd, fresh):
    monkeypatch.setenv("PROTON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("PATH", str(tmp_path))
    for module in HELPERS.values():
        assert module.helper() is None and module.helper() is None
    err = capfd.readouterr().err
    for name, said in FALLBACKS.items():
        assert err.count(said) == 1 and "install a C compiler (cc)" in err, (name, err)
    assert "Traceback" not in err
    monkeypatch.setenv(c_loader.NATIVE_ENV, "0")  # off: None, nothing said, nothing built
    assert all(m.helper() is None for m in HELPERS.values())
    assert capfd.readouterr().err == ""


@needs_root
def test_a_cache_folder_another_user_made_is_refused_by_every_helper(shared, capfd, fresh):
    """uid 65534 makes the cache's native/ folder first: no helper is built or loaded there
    (she could swap the library between its build and its load), each says why once."""
    folder = os.path.join(shared, "native")
    as_nobody("mkdir", "-m", "0755", folder)
    for module in HELPERS.values():
        assert module.helper() is None
    err = capfd.readouterr().err
    assert err.count("is not a folder of this user's") == len(HELPERS), err
    assert "PROTON_CACHE_DIR" in err and os.listdir(folder) == []
    assert os.stat(folder).st_uid == NOBODY


@needs_root
@needs_cc
def test_a_library_another_user_planted_is_built_again_never_loaded(shared, fresh):
    """Where the cache folder was once open to others (0777), uid 65534 puts a library whose
    constructor would run in our process at each helper's name: as her file, as her link, and
    as a file of ours she may write. Each is built again (the folder made private first), and
    her code never runs."""
    folder = os.path.join(shared, "native")
    os.mkdir(folder)
    os.chmod(folder, 0o777)
    ran = os.path.join(shared, "her code ran")
    evil = os.path.join(shared, "evil.so")
    with open(os.path.join(shared, "evil.c"), "w") as f:
        f.write('#include <stdio.h>\n__attribute__((constructor)) static void run(void) {\n'
                f'    FILE *f = fopen("{ran}", "w"); if (f) fclose(f);\n}}\n')
    subprocess.run([c_loader.compiler(), "-shared", "-fPIC", "-o", evil, f.name], check=True,
                   timeout=60)
    os.chmod(evil, 0o755)
    ctypes.CDLL(evil)  # the bait works: loading it runs her code
    assert os.path.exists(ran)
    os.remove(ran)
    paths = {name: m.HELPER.path() for name, m in HELPERS.items()}
    as_nobody("cp", evil, paths["native"])
    as_nobody("ln", "-s", evil, paths["pm"])
    shutil.copy(evil, paths["intra"])
    os.chmod(paths["intra"], 0o666)
    for name, module in HELPERS.items():
        assert module.helper() is not None, name
        st = os.lstat(paths[name])
        assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid(), name
        assert stat.S_IMODE(st.st_mode) & 0o022 == 0, name
    assert not os.path.exists(ran), "a planted library was loaded"
    assert stat.S_IMODE(os.stat(folder).st_mode) & 0o022 == 0


BUILD_AND_CALL = """
import ctypes, sys
from proton.cupti import pm_native
lib = pm_native.helper()
sys.exit(0 if lib is not None and lib.proton_pm_read(None, None, None, None, None, 0, None, 0,
                                                    0, 0, None, None, None) == 0 else 1)
"""


@needs_cc
def test_processes_that_build_at_once_each_load_a_whole_library(tmp_path):
    """Four processes building the same helper into an empty cache at once: each loads a
    whole library (a build is renamed into place), one stays, no build folder is left."""
    env = {**os.environ, "PROTON_CACHE_DIR": str(tmp_path)}
    env.pop(c_loader.NATIVE_ENV, None)
    runs = [subprocess.Popen([sys.executable, "-c", BUILD_AND_CALL], env=env,
                             stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for run in runs:
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
    assert [n.startswith("pm-") and n.endswith(".so")
            for n in os.listdir(tmp_path / "native")] == [True]
