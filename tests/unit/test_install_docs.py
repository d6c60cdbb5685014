"""The install steps the docs give work as written: conveyor is installed from a
clone (it is not on the package index), the venv's command is reachable, and
every extra the project asks of a dependency exists."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).parents[2]


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)


def test_no_install_step_fetches_conveyor_from_the_package_index() -> None:
    for doc in ("README.md", "docs/tutorial/first-minute.md"):
        for block in shell_blocks((ROOT / doc).read_text()):
            for line in block.splitlines():
                command = line.split("#")[0]
                assert not re.search(r"pip install +conveyor\b", command), (doc, line)


def test_the_first_steps_activate_the_venv_before_running_conveyor() -> None:
    for doc in ("README.md", "docs/tutorial/first-minute.md"):
        first = next(b for b in shell_blocks((ROOT / doc).read_text()) if "venv" in b)
        assert "source .venv/bin/activate" in first, doc
        assert ".venv/bin/conveyor" in (ROOT / doc).read_text(), doc


def test_the_readme_says_the_test_script_installs_system_packages() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "chromium" in readme
    assert "apt-get" in readme


def test_every_extra_asked_of_an_installed_dependency_exists() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = [project["dependencies"], *project["optional-dependencies"].values()]
    checked = 0
    for group in groups:
        for text in group:
            requirement = Requirement(text)
            if not requirement.extras or requirement.name == "conveyor":
                continue
            try:
                provided = metadata.metadata(requirement.name).get_all("Provides-Extra") or []
            except metadata.PackageNotFoundError:
                continue  # not installed here: nothing to compare with
            normalized = {extra.replace("_", "-").lower() for extra in provided}
            for extra in requirement.extras:
                assert extra.lower() in normalized, f"{requirement.name} has no extra {extra!r}"
            checked += 1
    assert checked > 0
