"""Run a module's main() in-process with patched args and an ordered run_command script."""

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


class ModuleExit(Exception):
    """exit_json or fail_json was called; ``result`` holds its keyword arguments."""

    def __init__(self, failed, result):
        super().__init__(result.get("msg", ""))
        self.failed = failed
        self.result = result


class CommandScript:
    """Answers run_command calls in order and records them; an unexpected call fails the test."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def __call__(self, module, args, **kwargs):
        self.calls.append(list(args))
        if not self.answers:
            raise AssertionError("unexpected run_command %r" % (args,))
        expected_prefix, answer = self.answers.pop(0)
        assert list(args[:len(expected_prefix)]) == list(expected_prefix), args
        return answer


@pytest.fixture
def run_module(monkeypatch):
    """Return ``run(main, args, commands=[(argv_prefix, (rc, out, err)), ...], bins={name: path})``."""

    def _exit(module, **kwargs):
        raise ModuleExit(False, kwargs)

    def _fail(module, msg, **kwargs):
        kwargs["msg"] = msg
        raise ModuleExit(True, kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail)

    def run(main, args, commands=(), bins=None):
        bins = bins or {}
        script = CommandScript(commands)

        def get_bin_path(module, name, required=False, opt_dirs=None):
            if name not in bins and required:
                module.fail_json(msg="Failed to find required executable %s" % name)
            return bins.get(name)

        def run_command(module, args, **kwargs):
            return script(module, args, **kwargs)

        monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
        monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
        with patch_module_args(args):
            with pytest.raises(ModuleExit) as caught:
                main()
        assert not script.answers, "run_command answers left unused: %r" % (script.answers,)
        caught.value.calls = script.calls
        return caught.value

    return run
