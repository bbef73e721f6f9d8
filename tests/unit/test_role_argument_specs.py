"""Every role's meta/argument_specs.yml mirrors defaults/main.yml key for key (house rule 2)."""

import os

import pytest
import yaml

ROLES_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "roles")
ROLES = sorted(name for name in os.listdir(ROLES_DIR) if os.path.isdir(os.path.join(ROLES_DIR, name)))
# What each argument spec type accepts as a default, in the YAML it is written in.
TYPE_CHECKS = {
    "str": lambda value: isinstance(value, str),
    "int": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "float": lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    "bool": lambda value: isinstance(value, bool),
    "list": lambda value: isinstance(value, list),
    "dict": lambda value: isinstance(value, dict),
    "path": lambda value: isinstance(value, str),
    "raw": lambda value: True,
}


def _load(role, *parts):
    path = os.path.join(ROLES_DIR, role, *parts)
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def _is_template(value):
    return isinstance(value, str) and "{{" in value


def test_there_are_roles():
    assert "preflight" in ROLES


@pytest.mark.parametrize("role", ROLES)
def test_main_spec_matches_defaults(role):
    defaults = _load(role, "defaults", "main.yml") or {}
    specs = _load(role, "meta", "argument_specs.yml")
    assert specs is not None, "roles/%s has no meta/argument_specs.yml" % role
    options = specs["argument_specs"]["main"].get("options", {})
    assert sorted(defaults) == sorted(name for name, spec in options.items() if not spec.get("required")), \
        "roles/%s: keys differ between defaults/main.yml and argument_specs main" % role
    for name, value in defaults.items():
        spec = options[name]
        assert spec.get("description"), "%s: %s has no description" % (role, name)
        assert spec.get("default") == value, "%s: %s default %r differs from defaults/main.yml %r" % (
            role, name, spec.get("default"), value)
        kind = spec.get("type", "str")
        if not _is_template(value):
            assert TYPE_CHECKS[kind](value), "%s: %s default %r is not a %s" % (role, name, value, kind)
        if kind == "list":
            assert "elements" in spec, "%s: list option %s needs elements" % (role, name)
        if "choices" in spec and not _is_template(value):
            values = value if spec.get("type") == "list" else [value]
            assert all(item in spec["choices"] for item in values), "%s: default of %s not in choices" % (role, name)


@pytest.mark.parametrize("role", ROLES)
def test_public_variables_are_role_prefixed(role):
    defaults = _load(role, "defaults", "main.yml") or {}
    assert all(name.startswith(role + "_") for name in defaults), sorted(defaults)
