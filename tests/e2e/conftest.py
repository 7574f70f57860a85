"""The end-to-end tests' shared project: the smoke profile built once per session (smoke_project.build)."""

from __future__ import annotations

import pytest
from smoke_project import build


@pytest.fixture(scope="session")
def repo(tmp_path_factory):
    """A copy of the project with the smoke profile as params.yaml, fully built once for every e2e module. Tests
    that change it (a param, a run) restore it or work on a copy of their own."""
    return build(tmp_path_factory.mktemp("clone"))
