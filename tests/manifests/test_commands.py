"""Management commands: issue_token, import_policy, recover_jobs."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ctxeng.accounts.models import Membership
from policies.models import PolicyRevision


def test_issue_token_creates_user_tenant_roles_and_prints_the_token_last(db):
    from rest_framework.authtoken.models import Token

    out = StringIO()
    call_command("issue_token", "bot", "--tenant", "acme", "--role", "agent", "--role", "reviewer", stdout=out)
    token = out.getvalue().strip().splitlines()[-1]
    assert Token.objects.get(key=token).user.username == "bot"
    assert set(Membership.objects.filter(user__username="bot", tenant__slug="acme").values_list("role", flat=True)) == {
        "agent", "reviewer"}
    again = StringIO()
    call_command("issue_token", "bot", "--tenant", "acme", "--role", "agent", stdout=again)
    assert again.getvalue().strip().splitlines()[-1] == token


def test_import_policy_imports_and_publishes_idempotently(db, tmp_path, example_policy_text):
    path = tmp_path / "policy.yaml"
    path.write_text(example_policy_text)
    call_command("import_policy", str(path), "--tenant", "acme", stdout=StringIO())
    assert PolicyRevision.objects.get().status == "draft"
    call_command("import_policy", str(path), "--tenant", "acme", "--publish", stdout=StringIO())
    call_command("import_policy", str(path), "--tenant", "acme", "--publish", stdout=StringIO())
    assert list(PolicyRevision.objects.values_list("revision", "status")) == [(3, "published")]


def test_import_policy_reports_invalid_files_with_field_paths(db, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("policy: {id: p, revision: 1}\n")
    with pytest.raises(CommandError, match="budget: field required"):
        call_command("import_policy", str(path), "--tenant", "acme")


def test_load_example_falls_back_to_the_vendored_examples(db, settings, tmp_path, inline_jobs,
                                                          django_capture_on_commit_callbacks):
    settings.CTXENG_EXAMPLES_DIR = tmp_path / "absent"
    out = StringIO()
    with django_capture_on_commit_callbacks(execute=True):
        call_command("load_example", stdout=out)
    assert "docs/examples/research-agent" in out.getvalue()


def test_load_example_publishes_the_starter_policies_next_to_the_example_once(db, inline_jobs,
                                                                             django_capture_on_commit_callbacks):
    from ctxeng import starters
    from ctxeng.engine import policy_digest

    for _ in range(2):  # `make run` again on the same database changes nothing
        out = StringIO()
        with django_capture_on_commit_callbacks(execute=True):
            call_command("load_example", stdout=out)
    published = PolicyRevision.objects.filter(policy__tenant__slug="tenant-x", status="published")
    rows = {r.policy.policy_id: (r.revision, r.digest) for r in published}
    assert rows == {
        "source-research": (3, rows["source-research"][1]),
        **{name: (1, policy_digest(starters.load(name))) for name in ("chat-agent", "coding-agent", "research-agent")},
    }
    assert PolicyRevision.objects.count() == 4
    assert "starter policy chat-agent/1 published" in out.getvalue()


def test_the_examples_load_example_reads_are_the_contract_the_repository_records(settings):
    """Whichever copy `load_example` reads (the shared examples when present, else the vendored
    ones) holds the files SHA256SUMS records."""
    from manifests.examples import FILES, example_dir
    from tests.golden import digests_of, recorded_digests

    recorded = recorded_digests()
    assert set(recorded) == set(FILES)
    assert digests_of(example_dir(), recorded) == recorded
    assert digests_of(settings.CTXENG_VENDORED_EXAMPLES_DIR / "research-agent", recorded) == recorded


def test_recover_jobs_prints_what_it_did(db):
    out = StringIO()
    call_command("recover_jobs", stdout=out)
    assert out.getvalue().strip() == "requeued: 0, failed: 0, resent: 0"


@pytest.mark.parametrize("every", ["0", "-5", "soon", "nan", "inf"])
def test_the_sweeper_refuses_an_interval_that_is_not_positive_seconds_with_exit_2(db, every):
    with pytest.raises(CommandError, match="--every: expected a positive number of seconds") as refused:
        call_command("recover_jobs", "--every", every)
    assert refused.value.returncode == 2


def test_a_failed_sweep_is_logged_with_its_traceback_and_the_sweeper_sweeps_on(monkeypatch, caplog):
    import logging
    import signal

    from manifests.management.commands import recover_jobs

    handlers = {}
    monkeypatch.setattr(signal, "signal", lambda signum, handler: handlers.__setitem__(signum, handler))
    sweeps = []

    def sweep():
        sweeps.append(len(sweeps))
        if len(sweeps) == 1:
            raise RuntimeError("database away")
        handlers[signal.SIGTERM](signal.SIGTERM, None)  # stopped after the second sweep, which succeeds
        return {"requeued": 0, "failed": 0, "resent": 0}

    monkeypatch.setattr(recover_jobs, "assembly_jobs_recover", sweep)
    with caplog.at_level(logging.WARNING, logger=recover_jobs.__name__):
        call_command("recover_jobs", "--every", "0.001", stdout=StringIO())
    assert sweeps == [0, 1]
    [record] = [r for r in caplog.records if r.name == recover_jobs.__name__]
    assert record.getMessage() == "stale-job sweep failed; trying again in 0.001 s"
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
    assert "database away" in caplog.text
