"""Workers survive their broker (issue 51, N2), and the stale-job sweep runs without them.

A broker restart under load made busy Celery workers exit (`Unrecoverable error:
AttributeError("'NoneType' object has no attribute 'hostname'")`), and the jobs queued meanwhile
stayed queued: the sweep that re-sends them ran inside the dead workers. Here a private
redis-server (its own, not the session's broker) is killed and started again on the same port,
several times, while real workers are busy; the sweeper runs as its own process
(`manage.py recover_jobs --every`), as in deploy/ctxeng-sweeper.service. Waits end at events with
generous deadlines; no duration is asserted.

Each outage lasts until every worker has noticed it (tried to reconnect and been refused). Now and
then, mostly on a loaded machine, one never did: the heartbeat its main process sends every 2 s
(Celery asks kombu to retry it with no limit) fell due after the kill and before its event loop
had seen the dropped connection, and the loop stayed inside that retry, silent, until the broker
came back, which it did not (the test waited for the worker). The app's event dispatcher now
bounds that retry (ctxeng.server.celery.BoundedRetryDispatcher); the first test here pins it
directly, the restarts test in a real worker.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.service_fixtures import REPO, _free_port, _redis_ping, database_url_for_subprocess

pytestmark = pytest.mark.slow

GENEROUS = 300.0
RESTARTS = 6


class RestartableRedis:
    """A redis-server on a fixed port that a test can kill and start again (no persistence: a
    restart loses every queue, the harshest case)."""

    def __init__(self) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            pytest.fail("no redis-server binary: install it (apt-get install redis-server)")
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while not _redis_ping(self.url):
            assert time.monotonic() < deadline, "redis-server did not start within 30 s"
            time.sleep(0.05)

    def kill(self, graceful: bool = False) -> None:
        """SIGKILL, or SIGTERM (`graceful`: what a service manager's restart sends)."""
        if self.process is not None and self.process.poll() is None:
            if graceful:
                self.process.terminate()
            else:
                self.process.kill()
            self.process.wait(10)

    def restart(self) -> None:
        self.kill()
        self.start()


@pytest.fixture(scope="module")
def broker():
    server = RestartableRedis()
    yield server
    server.kill()


@pytest.fixture
def redis_url(broker):
    """The broker of this module's workers: the restartable one (overrides the session's), running
    (a test that failed mid-outage left it stopped)."""
    if broker.process is None or broker.process.poll() is not None:
        broker.start()
    return broker.url


class Sweeper:
    """`manage.py recover_jobs --every SECONDS`: the sweeper process, no worker in it."""

    def __init__(self, env: dict[str, str], log_path: Path, every: float = 0.5) -> None:
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "recover_jobs", "--every", str(every)],
            cwd=REPO, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self._log.close()


@pytest.fixture
def start_sweeper(celery_jobs, transactional_db, tmp_path):
    sweepers: list[Sweeper] = []

    def start(**extra_env: str) -> Sweeper:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("CTXENG_TEST_") and k not in ("DATABASE_URL", "REDIS_URL")}
        env.update(DJANGO_SETTINGS_MODULE="ctxeng.server.settings", DATABASE_URL=database_url_for_subprocess(),
                   REDIS_URL=celery_jobs, PYTHONUNBUFFERED="1")
        env.update({k: str(v) for k, v in extra_env.items()})
        sweeper = Sweeper(env, tmp_path / f"sweeper-{len(sweepers) + 1}.log")
        sweepers.append(sweeper)
        return sweeper

    yield start
    for sweeper in sweepers:
        sweeper.stop()


def submit(agent_api, example_request, run_id: str) -> str:
    response = agent_api.post("/api/v1/assemblies/", example_request | {"run_id": run_id}, format="json")
    assert response.status_code == 202, response.content
    return response.json()["id"]


def wait_until(condition, what: str, logs, workers=()) -> None:
    """Wait for `condition`; fail at the deadline, or at once when one of `workers` has exited."""
    deadline = time.monotonic() + GENEROUS
    while not condition():
        for worker in workers:
            assert worker.process.poll() is None, f"worker {worker.name} exited:\n{worker.log()[-6000:]}"
        assert time.monotonic() < deadline, f"{what}:\n" + "\n".join(log()[-4000:] for log in logs)
        time.sleep(0.1)


def queued_count(job_ids: list[str]) -> int:
    from manifests.models import AssemblyJob

    return AssemblyJob.objects.filter(id__in=job_ids, status="queued").count()


def running_count(job_ids: list[str]) -> int:
    from manifests.models import AssemblyJob

    return AssemblyJob.objects.filter(id__in=job_ids, status="running").count()


def resent_by(log: str) -> int:
    """The jobs a sweeper's log says it re-sent (manifests.services.assembly_jobs_recover)."""
    return sum(int(n) for n in re.findall(r"job recovery: \{[^}]*'resent': (\d+)", log))


def ready_count(job_ids: list[str]) -> int:
    from manifests.models import AssemblyJob

    return AssemblyJob.objects.filter(id__in=job_ids, status="ready").count()


def final(job_ids: list[str]) -> bool:
    from manifests.models import AssemblyJob

    return not AssemblyJob.objects.filter(id__in=job_ids, status__in=("queued", "running")).exists()


def test_a_heartbeat_due_while_the_broker_is_down_gives_up_and_goes_out_once_it_is_back(broker):
    """What a worker's main process does every 2 s, in its event loop: send a heartbeat with
    `retry`. With the broker down it returns (the event kept for later) instead of retrying for
    the whole outage, which held the loop so that the worker never noticed the outage. Bounded,
    it still goes out once the broker is back, on the connection the restart had dropped."""
    from ctxeng.server.celery import app

    def heartbeat(dispatcher) -> None:
        beat = threading.Thread(target=dispatcher.send, args=("worker-heartbeat",), kwargs={"retry": True},
                                daemon=True)
        beat.start()
        beat.join(GENEROUS)
        assert not beat.is_alive(), "the heartbeat is still retrying"

    with app.connection_for_write(broker.url) as connection:
        dispatcher = app.events.Dispatcher(connection, hostname="probe@test", groups=["worker"])
        heartbeat(dispatcher)
        assert not dispatcher._outbound_buffer  # noqa: SLF001 - sent, nothing kept for later
        broker.kill()
        try:
            heartbeat(dispatcher)
            assert len(dispatcher._outbound_buffer) == 1  # noqa: SLF001 - kept, to go with the next flush
        finally:
            broker.start()
        heartbeat(dispatcher)
        assert len(dispatcher._outbound_buffer) == 1  # noqa: SLF001 - this one was sent


def test_busy_workers_survive_broker_restarts_and_every_job_is_done_once(
    broker, start_worker, start_sweeper, published_policy, agent_api, example_request
):
    """Two workers of three processes each, busy on four jobs (each sleeps in it) when the broker
    is killed and started again; six times, each time with new jobs, and one more submitted during
    each outage. The restart loses the queues (no persistence) and the outage the messages of the
    jobs submitted meanwhile: the sweeper process re-sends what was lost."""
    from manifests.models import AssemblyJob, Manifest

    quick = {"CTXENG_TEST_TASK_SLEEP_SECONDS": "4", "CTXENG_REQUEUE_QUEUED_AFTER_SECONDS": "3"}
    workers = [start_worker(concurrency=3, as_deployed=True, **quick) for _ in range(2)]
    sweeper = start_sweeper(CTXENG_REQUEUE_QUEUED_AFTER_SECONDS="3")
    logs = [w.log for w in workers] + [sweeper.log]

    jobs: list[str] = []
    for restart in range(RESTARTS):
        # Four jobs on six processes: a worker with a free process waits on the broker (a BRPOP)
        # while holding unacknowledged messages, the state in which Celery 5.7 exited.
        batch = [submit(agent_api, example_request, f"r{restart}-{n}") for n in range(4)]
        jobs += batch
        wait_until(lambda batch=batch: queued_count(batch) == 0 and running_count(batch) > 0, "jobs never ran",
                   logs, workers)
        connected = [w.log().count("Connected to redis") for w in workers]
        # The outage lasts until a job ends (its worker acknowledges it while the broker is away)
        # and until every worker has tried to reconnect and been refused, busy or not, and whether
        # or not its heartbeat fell due before its event loop saw the connection drop.
        done = ready_count(jobs)
        refused = [w.log().count("Cannot connect to redis") for w in workers]
        broker.kill(graceful=restart % 2 == 1)
        wait_until(lambda done=done, jobs=jobs: ready_count(jobs) > done, "no job ended during the outage", logs, workers)
        wait_until(lambda refused=refused: all(w.log().count("Cannot connect to redis") > n
                                               for w, n in zip(workers, refused, strict=True)),
                   "a worker never noticed the outage", logs, workers)
        # A job submitted while the broker is away is saved and answered (202), its message not
        # sent: only the sweeper process can send it, once the broker is back.
        jobs.append(submit(agent_api, example_request, f"r{restart}-outage"))
        broker.start()
        wait_until(lambda connected=connected: all(w.log().count("Connected to redis") > n
                                                   for w, n in zip(workers, connected, strict=True)),
                   "a worker did not reconnect", logs, workers)
    wait_until(lambda: final(jobs), "jobs left queued or running", logs, workers)

    for worker in workers:
        assert worker.process.poll() is None, worker.log()[-4000:]
        assert "Unrecoverable error" not in worker.log(), worker.log()[-4000:]
    rows = AssemblyJob.objects.filter(id__in=jobs)
    assert set(rows.values_list("status", flat=True)) == {"ready"}
    assert set(rows.values_list("attempts", flat=True)) == {1}  # none run twice
    assert Manifest.objects.filter(job_id__in=jobs).count() == len(jobs)
    # What the outages lost, the sweeper process sent again: at least the job submitted in each.
    assert resent_by(sweeper.log()) >= RESTARTS, sweeper.log()[-4000:]


def test_the_sweeper_process_requeues_a_job_whose_worker_died_with_no_worker_alive(
    start_worker, start_sweeper, published_policy, agent_api, example_request
):
    """The worker running the job is SIGKILLed, so no worker is alive to sweep: the sweeper
    process alone puts the job back in the queue (attempt 1 lost), and the next worker runs it."""
    from manifests.models import AssemblyJob, Manifest

    doomed = start_worker(CTXENG_TEST_TASK_SLEEP_SECONDS="600", CTXENG_HEARTBEAT_SECONDS="0.5")
    job_id = submit(agent_api, example_request, "doomed")
    wait_until(lambda: running_count([job_id]) == 1, "the job never ran", [doomed.log])
    doomed.kill()

    sweeper = start_sweeper(CTXENG_STALE_AFTER_SECONDS="3")
    wait_until(lambda: "'requeued': 1" in sweeper.log(), "the sweeper never requeued it", [sweeper.log])
    job = AssemblyJob.objects.get(id=job_id)  # no worker is alive: the sweeper process did it
    assert (job.status, job.attempts) == ("queued", 1)
    assert job.error.startswith("attempt 1: worker lost"), job.error

    worker = start_worker()
    wait_until(lambda: final([job_id]), "the requeued job never finished", [worker.log, sweeper.log])
    job = AssemblyJob.objects.get(id=job_id)
    assert (job.status, job.attempts) == ("ready", 2)
    assert Manifest.objects.filter(job_id=job_id).count() == 1

