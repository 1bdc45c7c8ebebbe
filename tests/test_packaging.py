"""The wheel's package list: every package under src/, the property suite and the oracle, nothing else.

setuptools is given the list (``find`` cannot map a folder outside ``src/``),
so a new subpackage left off it would be missing from the wheel only, where
no clone test would notice; this reads the list and the tree and compares.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # the test extra installs tomli on 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"crossattn_sizing.properties": "properties", "crossattn_sizing.reference": "reference"}


def setuptools_table() -> dict:  # type: ignore[type-arg]
    with open(ROOT / "pyproject.toml", "rb") as file:
        return dict(tomllib.load(file)["tool"]["setuptools"])


def packages_under(folder: Path, name: str, skip: tuple[str, ...] = ()) -> set[str]:
    """Dotted names of ``folder`` and every package below it (a folder with ``__init__.py``)."""
    found = set()
    for init in folder.rglob("__init__.py"):
        parts = init.parent.relative_to(folder).parts
        if not any(part in skip for part in parts):
            found.add(".".join((name, *parts)))
    return found


def expected_packages() -> set[str]:
    expected = packages_under(ROOT / "src" / "crossattn_sizing", "crossattn_sizing")
    for name, folder in MAPPED.items():
        expected |= packages_under(ROOT / folder, name, skip=("tests",))  # the oracle's tests stay here
    return expected


def test_the_wheel_lists_every_package_of_the_tree() -> None:
    assert set(setuptools_table()["packages"]) == expected_packages()


def test_the_suite_and_the_oracle_are_mapped_from_their_folders() -> None:
    package_dir = setuptools_table()["package-dir"]
    assert package_dir == {"": "src", **MAPPED}
    assert {"crossattn_sizing.properties.regressions", "crossattn_sizing.reference"} <= expected_packages()


def test_the_comparison_sees_a_missing_package(tmp_path: Path) -> None:
    """Meta-test: a subpackage the list lacks is told apart (the check above is not vacuous)."""
    (tmp_path / "new").mkdir()
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "new" / "__init__.py").write_text("")
    assert packages_under(tmp_path, "pkg") == {"pkg", "pkg.new"}
    assert not packages_under(tmp_path, "pkg") <= set(setuptools_table()["packages"])
