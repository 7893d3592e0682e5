"""The Kubernetes backend against a fake API server that speaks the real JSON, through the real kubernetes
client: what a launch creates, how status reads the Job and its pods, logs resumed across consoles,
following, stopping, and the one-line errors of a cluster that refuses or fails."""

from __future__ import annotations

import base64
import io
import json
import os
import tarfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("kubernetes")
pytest.importorskip("aiohttp")

from fakes.k8s_api import FakeKubeAPI

from trnconsole.backends import get_backend
from trnconsole.backends import kubernetes as kubernetes_backend
from trnconsole.backends.kubernetes import KubernetesBackend, job_name, load_client
from trnconsole.backends.options import K8S
from trnconsole.backends.package import PUBLIC_NEURON_IMAGE, bootstrap_command, package_source
from trnconsole.core.errors import UsageError
from trnconsole.core.spec import RunSpec
from trnconsole.core.store import RunRecord

T = TypeVar("T")
NS = "ml"
T0 = 1_790_000_000  # whole seconds, as log times in nanoseconds are built from it
SECOND = 1_000_000_000
NEURON_MESSAGE = (
    "0/3 nodes are available: 3 Insufficient aws.amazon.com/neuron. preemption: 0/3 nodes are available: "
    "3 No preemption victims found for incoming pod."
)


@pytest.fixture(scope="module")
def api():
    fake = FakeKubeAPI()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def cluster(api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKubeAPI:
    api.reset()
    monkeypatch.setenv("KUBECONFIG", str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return api


@pytest.fixture
def backend():
    made: list[KubernetesBackend] = []

    def make() -> KubernetesBackend:
        made.append(KubernetesBackend(retry_base_s=0.01))
        return made[-1]

    yield make
    for one in made:
        one.close()


def make_record(
    tmp_path: Path, run_id: str = "a1b2c3d4", nnodes: int = 1, nproc: int = 2, **kw: Any
) -> RunRecord:
    spec = RunSpec(
        runner=kw.pop("runner", "bert"),
        flags={"synthetic": True, "steps": "20"},
        env=kw.pop("env", {"HF_HUB_OFFLINE": "1"}),
        backend="k8s",
        nproc=nproc,
        nnodes=nnodes,
        name=kw.get("name"),
        backend_options=dict(kw.pop("options", {})),
    )
    return RunRecord(
        id=run_id,
        name=kw.get("name"),
        runner=spec.runner_label,
        backend="k8s",
        spec=spec,
        status="starting",
        created_at=time.time(),
        run_dir=tmp_path / run_id,
    )


def launch(backend: KubernetesBackend, record: RunRecord) -> RunRecord:
    sub = backend.submit(record)
    return replace(record, handle=sub.handle, started_at=sub.started_at, status="running")


def until(produce: Callable[[], T], check: Callable[[T], bool], timeout: float = 5.0) -> T:
    """Poll produce() until check() holds; the watch delivers pod changes a moment after they happen."""
    deadline = time.monotonic() + timeout
    while True:
        value = produce()
        if check(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still {value!r} after {timeout} s")
        time.sleep(0.05)


def pods_of(api: FakeKubeAPI, record: RunRecord) -> list[str]:
    return [p["metadata"]["name"] for p in api.job_pods(NS, record.handle["job"])]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container["env"] if "value" in e}


# ---- the module and its options ----


def test_the_registry_makes_it_with_no_arguments_and_it_takes_the_k8s_options() -> None:
    made = get_backend("k8s")
    assert isinstance(made, KubernetesBackend)
    assert (made.name, made.remote, made.options) == ("k8s", True, frozenset(K8S))


def test_job_names_are_dns_labels_with_the_run_id() -> None:
    def name(label: str | None, runner: str = "bert", run_id: str = "a1b2c3d4") -> str:
        return job_name(RunSpec(runner=runner, name=label), run_id)

    assert name(None) == "bert-a1b2c3d4"
    assert name(None, runner="/home/me/Train_Big.py") == "train-big-a1b2c3d4"
    assert name("2nd try!") == "trn-2nd-try-a1b2c3d4"
    assert name("___") == "trn-a1b2c3d4"
    long = name("x" * 200)
    assert len(long) == 52 and long.endswith("x-a1b2c3d4")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"neuron_devices": "many"}, "--neuron-devices many: not a whole number"),
        ({"efa": "-1"}, "--efa -1: must be at least 0"),
        ({"scheduler": "kueue"}, "--scheduler kueue: not supported; use --scheduler volcano"),
        ({"memory": "16 GB"}, "--memory 16 GB: not a Kubernetes quantity; write it like --memory 16Gi"),
        ({"namespace": "ML_team"}, "--namespace ML_team: not a Kubernetes name"),
        ({"pvc": "FSx"}, "--pvc FSx: not a Kubernetes name"),
        ({"context": "nowhere"}, "--context nowhere: not in KUBECONFIG "),
    ],
)
def test_check_refuses_bad_options_in_one_line(cluster, backend, tmp_path, options, message) -> None:
    with pytest.raises(UsageError) as err:
        backend().check(make_record(tmp_path, options=options).spec)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_check_refuses_a_source_too_big_for_a_configmap(cluster, backend, tmp_path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    (code / "weights.bin").write_bytes(os.urandom(1_100_000))  # random bytes do not compress
    record = make_record(tmp_path, runner=str(code / "train.py"))
    with pytest.raises(UsageError) as err:
        backend().check(record.spec)
    text = str(err.value)
    assert text.startswith(f"RUNNER {code / 'train.py'}: the packaged source is ")
    assert "more than the 1 MiB a ConfigMap holds; pass a --source-dir holding only the training code" in text


def test_check_refuses_zero_nodes(cluster, backend, tmp_path) -> None:
    with pytest.raises(UsageError, match=r"^--nnodes 0: must be at least 1"):
        backend().check(make_record(tmp_path, nnodes=0).spec)


def test_missing_kubeconfig_is_one_line_saying_how_to_set_it(backend, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    record = make_record(tmp_path)
    for attempt in (lambda: backend().check(record.spec), lambda: backend().submit(record)):
        with pytest.raises(UsageError) as err:
            attempt()
        assert str(err.value) == (
            "kubeconfig: none found (no --kubeconfig, KUBECONFIG unset, no ~/.kube/config, not inside a "
            "cluster); run `aws eks update-kubeconfig --name CLUSTER` or pass --kubeconfig FILE"
        )
    with pytest.raises(UsageError, match=r"^--kubeconfig /nope/config: no such file$"):
        backend().check(make_record(tmp_path, options={"kubeconfig": "/nope/config"}).spec)


def test_a_kubeconfig_without_a_current_context_asks_for_one(cluster, backend, tmp_path) -> None:
    config = json.loads((tmp_path / "kubeconfig").read_text())
    del config["current-context"]
    (tmp_path / "kubeconfig").write_text(json.dumps(config))
    with pytest.raises(UsageError) as err:
        backend().check(make_record(tmp_path).spec)
    assert str(err.value) == (
        f"KUBECONFIG {tmp_path / 'kubeconfig'}: no current context; pass --context NAME (fake) "
        "or run `kubectl config use-context NAME`"
    )
    record = launch(backend(), make_record(tmp_path, options={"context": "fake"}))
    assert (record.handle["context"], record.handle["namespace"]) == ("fake", NS)


# ---- launch ----


def test_launch_creates_an_indexed_job_a_headless_service_and_the_source(cluster, backend, tmp_path) -> None:
    options = {
        "pvc": "fsx-claim",
        "neuron_devices": "16",
        "efa": "8",
        "cpu": "96",
        "memory": "400Gi",
        "service_account": "trainer",
        "neuron_cc_flags": "--model-type=transformer",
        "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1",
    }
    record = launch(backend(), make_record(tmp_path, nnodes=2, nproc=32, options=options, env={"A": "b c"}))
    name = "bert-a1b2c3d4"
    assert record.handle == {
        "kubeconfig": str((tmp_path / "kubeconfig").resolve()),
        "context": "fake",
        "namespace": NS,
        "job": name,
        "service": name,
        "configmap": f"{name}-source",
        "podgroup": None,
        "nnodes": 2,
    }
    assert cluster.token not in json.dumps(record.handle)

    job = cluster.get("jobs", NS, name)
    labels = {"app.kubernetes.io/managed-by": "trnconsole", "trnconsole/run-id": "a1b2c3d4"}
    assert job["metadata"]["labels"] == labels
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["backoffLimit"] == 0 and spec["suspend"] is False  # resumed once its companions existed
    pod = spec["template"]["spec"]
    assert (pod["subdomain"], pod["restartPolicy"], pod["serviceAccountName"]) == (
        name,
        "Never",
        "trainer",
    )
    assert "schedulerName" not in pod
    (container,) = pod["containers"]
    assert container["image"] == options["image"]
    source = package_source(record.spec)
    assert container["command"] == bootstrap_command(
        "/opt/trnconsole/source/sourcedir.tar.gz", record.spec, "bert.py", "/shared/trnconsole/a1b2c3d4"
    )
    assert container["command"][-2:] == ["--output-dir", "/shared/trnconsole/a1b2c3d4"]
    assert env_of(container) == {
        "PYTHONUNBUFFERED": "1",
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "FI_EFA_FORK_SAFE": "1",
        "NEURON_COMPILE_CACHE_URL": "/shared/neuron-compile-cache",
        "A": "b c",
        "NEURON_CC_FLAGS": "--model-type=transformer",
        "NEURON_PROCESS_TAG": "a1b2c3d4",
        "TRNCONSOLE_RUN_ID": "a1b2c3d4",
        "TRNCONSOLE_MASTER_ADDR": f"{name}-0.{name}",
        "TRNCONSOLE_MASTER_PORT": "29500",
        "TRNCONSOLE_RUN_DIR": "/shared/trnconsole/a1b2c3d4",  # the job's outputs, on the shared volume
    }
    assert container["resources"] == {
        "requests": {"cpu": "96", "memory": "400Gi"},
        "limits": {"aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "8"},
    }
    assert {t["key"] for t in pod["tolerations"]} == {"aws.amazon.com/neuron", "vpc.amazonaws.com/efa"}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"source": "/opt/trnconsole/source", "dshm": "/dev/shm", "shared": "/shared"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["source"]["configMap"] == {"name": f"{name}-source"}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory"}
    assert volumes["shared"]["persistentVolumeClaim"] == {"claimName": "fsx-claim"}

    service = cluster.get("services", NS, name)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"job-name": name}
    assert [p["port"] for p in service["spec"]["ports"]] == [29500]
    configmap = cluster.get("configmaps", NS, f"{name}-source")
    tarball = base64.b64decode(configmap["binaryData"]["sourcedir.tar.gz"])
    assert tarball == source.tarball
    with tarfile.open(fileobj=io.BytesIO(tarball)) as tar:
        files = set(tar.getnames())
    assert {"bert.py", "gpt2.py", "vit.py"} <= files and any(f.startswith("trn_harness/") for f in files)
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job["metadata"]["uid"]}]
    assert service["metadata"]["ownerReferences"] == owner == configmap["metadata"]["ownerReferences"]

    pods = cluster.job_pods(NS, name)
    assert [p["spec"]["hostname"] for p in pods] == [f"{name}-0", f"{name}-1"]


def test_defaults_without_a_pvc_write_to_tmp_with_one_device_per_two_workers(
    cluster, backend, tmp_path
) -> None:
    record = launch(backend(), make_record(tmp_path, nproc=2, name="Smoke Test"))
    assert record.handle["job"] == "smoke-test-a1b2c3d4"
    pod = cluster.get("jobs", NS, "smoke-test-a1b2c3d4")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == PUBLIC_NEURON_IMAGE
    assert container["command"][-2:] == ["--output-dir", "/tmp/trnconsole/a1b2c3d4"]
    assert container["resources"] == {
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"aws.amazon.com/neuron": "1"},
    }
    env = env_of(container)
    assert "NEURON_COMPILE_CACHE_URL" not in env and "FI_PROVIDER" not in env
    assert env["TRNCONSOLE_RUN_DIR"] == "/tmp/trnconsole/a1b2c3d4"
    assert {v["name"] for v in pod["volumes"]} == {"source", "dshm"}
    assert "serviceAccountName" not in pod


def test_the_namespace_option_wins_over_the_contexts(cluster, backend, tmp_path) -> None:
    record = launch(
        backend(), make_record(tmp_path, options={"namespace": "research", "neuron_devices": "0"})
    )
    assert record.handle["namespace"] == "research"
    job = cluster.get("jobs", "research", record.handle["job"])
    assert "limits" not in job["spec"]["template"]["spec"]["containers"][0]["resources"]


def test_volcano_gang_schedules_the_pods_with_a_podgroup(cluster, backend, tmp_path) -> None:
    one = backend()
    record = launch(one, make_record(tmp_path, nnodes=4, options={"scheduler": "volcano"}))
    job = cluster.get("jobs", NS, record.handle["job"])
    template = job["spec"]["template"]
    assert template["spec"]["schedulerName"] == "volcano"
    assert template["metadata"]["annotations"] == {"scheduling.k8s.io/group-name": record.handle["job"]}
    group = cluster.get("podgroups", NS, record.handle["podgroup"])
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1" and group["spec"] == {"minMember": 4}
    assert group["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    one.stop(record)
    assert cluster.list("podgroups", NS) == []


def test_a_cluster_without_volcano_is_one_line_and_nothing_is_left_behind(cluster, backend, tmp_path) -> None:
    cluster.volcano = False
    with pytest.raises(UsageError) as err:
        backend().submit(make_record(tmp_path, options={"scheduler": "volcano"}))
    assert str(err.value) == (
        "--scheduler volcano: the cluster has no podgroups.scheduling.volcano.sh resource; install Volcano, "
        "or leave --scheduler out to use the default scheduler"
    )
    assert [cluster.list(kind, NS) for kind in ("jobs", "services", "configmaps", "pods")] == [[], [], [], []]


# ---- status ----


def test_status_goes_from_pending_to_running_to_completed(cluster, backend, tmp_path) -> None:
    one = backend()
    record = launch(one, make_record(tmp_path))
    first = one.status(record)
    assert first.state == "running" and first.message is None
    assert first.detail["phase"] == "Pending"
    assert [(p["index"], p["phase"]) for p in first.detail["pods"]] == [(0, "Pending")]
    (pod,) = pods_of(cluster, record)
    cluster.set_pod_phase(NS, pod, "Running", node="ip-10-0-7-3")
    running = until(lambda: one.status(record), lambda s: s.detail["phase"] == "Running")
    assert running.state == "running"
    facts = dict(running.detail["pods"][0])
    assert facts.pop("name") == pod
    assert facts == {
        "index": 0,
        "phase": "Running",
        "node": "ip-10-0-7-3",
        "restarts": 0,
    }
    cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)
    done = one.status(record)
    assert (done.state, done.exit_code, done.message) == ("completed", 0, None)
    assert done.ended_at is not None and abs(done.ended_at - time.time()) < 5
    assert done.detail["phase"] == "Complete" and done.detail["succeeded"] == 1
    assert done.detail["pods"][0]["reason"] == "Completed"
    json.dumps(done.detail)


def test_a_failed_rank_fails_the_run_with_its_exit_code_and_reason(cluster, backend, tmp_path) -> None:
    one = backend()
    record = launch(one, make_record(tmp_path, nnodes=2))
    rank0, rank1 = pods_of(cluster, record)
    cluster.set_pod_phase(NS, rank0, "Running")
    cluster.set_pod_phase(NS, rank1, "Failed", exit_code=137, reason="OOMKilled", node="ip-10-0-9-9")
    status = one.status(record)
    assert (status.state, status.exit_code) == ("failed", 137)
    assert status.message == f"rank 1 ({rank1} on ip-10-0-9-9) exited with code 137 (OOMKilled)"
    assert status.detail["phase"] == "Failed" and status.detail["failed"] == 1
    assert status.ended_at is not None


def test_an_unschedulable_pod_is_explained_by_the_resource_it_lacks(cluster, backend, tmp_path) -> None:
    one = backend()
    record = launch(one, make_record(tmp_path, nnodes=2, options={"neuron_devices": "16"}))
    _, rank1 = pods_of(cluster, record)
    assert one.status(record).message is None
    cluster.set_pod_unschedulable(NS, rank1, NEURON_MESSAGE)
    status = until(lambda: one.status(record), lambda s: s.message is not None)
    assert status.state == "running"
    assert status.message == (
        "rank 1 cannot be scheduled: no node has 16 aws.amazon.com/neuron free "
        "(0/3 nodes are available: 3 Insufficient aws.amazon.com/neuron)"
    )
    assert status.detail["problem"] == status.message
    assert status.detail["pods"][1]["reason"] == "Unschedulable"


def test_an_image_that_cannot_be_pulled_is_explained(cluster, backend, tmp_path) -> None:
    one = backend()
    record = launch(one, make_record(tmp_path, options={"image": "example.com/nope:1"}))
    (pod,) = pods_of(cluster, record)
    one.status(record)
    cluster.set_pod_waiting(NS, pod, "ImagePullBackOff", 'Back-off pulling image "example.com/nope:1"')
    status = until(lambda: one.status(record), lambda s: s.message is not None)
    assert status.message == (
        "rank 0 cannot pull its image example.com/nope:1: ImagePullBackOff: "
        'Back-off pulling image "example.com/nope:1"'
    )


def test_pod_changes_still_arrive_after_the_watch_expires(cluster, backend, tmp_path) -> None:
    one = backend()
    record = launch(one, make_record(tmp_path))
    one.status(record)  # starts the watch
    (pod,) = pods_of(cluster, record)
    cluster.expire_watches()  # the open watch ends and its resourceVersion is too old to resume from
    cluster.set_pod_phase(NS, pod, "Running")
    until(lambda: one.status(record), lambda s: s.detail["phase"] == "Running")
    assert cluster.count("list", "pods") >= 2  # listed again after the 410 Gone


def test_a_job_deleted_outside_the_console_is_lost(cluster, backend, tmp_path) -> None:
    one = backend()
    record = launch(one, make_record(tmp_path))
    cluster.delete_job(NS, record.handle["job"])
    status = one.status(record)
    assert status.state == "lost"
    assert (
        status.message == "the Job bert-a1b2c3d4 is gone from namespace ml: it was deleted outside trnconsole"
    )


# ---- logs ----


def test_logs_of_two_ranks_resume_in_a_new_backend_with_nothing_repeated_or_lost(
    cluster, backend, tmp_path
) -> None:
    record = launch(backend(), make_record(tmp_path, nnodes=2))
    rank0, rank1 = pods_of(cluster, record)
    for pod in (rank0, rank1):
        cluster.set_pod_phase(NS, pod, "Running")
    cluster.append_log(NS, rank0, "r0 a", "r0 b", at=T0 * SECOND)  # a whole second: "...:20Z"
    cluster.append_log(NS, rank1, "r1 a", at=T0 * SECOND + 250_000_000)
    cluster.append_log(NS, rank0, "r0 c", at=T0 * SECOND + 500_000_000)
    first, cursor = backend().logs(record, None)
    assert first == ["[rank 0] r0 a", "[rank 0] r0 b", "[rank 1] r1 a", "[rank 0] r0 c"]
    saved = json.loads(json.dumps(cursor))  # as the store keeps it across a console restart

    # Lines written since: some carry exactly the last timestamp already delivered, one of them as the
    # third line at that time; others are later in the same second and in the next one.
    cluster.append_log(NS, rank0, "r0 d", at=T0 * SECOND + 500_000_000)
    cluster.append_log(NS, rank1, "r1 b", "r1 c", at=T0 * SECOND + 250_000_000)
    cluster.append_log(NS, rank0, "r0 e", at=(T0 + 1) * SECOND)
    cluster.append_log(NS, rank1, "r1 d", at=T0 * SECOND + 900_000_001)
    restarted = backend()
    second, cursor = restarted.logs(record, saved)
    assert second == ["[rank 1] r1 b", "[rank 1] r1 c", "[rank 0] r0 d", "[rank 1] r1 d", "[rank 0] r0 e"]
    assert restarted.logs(record, cursor) == ([], cursor)
    everything, _ = backend().logs(record, None)
    assert sorted(everything) == sorted(first + second)


def test_a_long_log_arrives_in_windows_with_nothing_cut_or_repeated(
    cluster, backend, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(kubernetes_backend, "LOG_LIMIT_BYTES", 300)  # a few lines per read
    one = backend()
    record = launch(one, make_record(tmp_path))
    (pod,) = pods_of(cluster, record)
    cluster.set_pod_phase(NS, pod, "Running")
    expected = [f"step {i} loss {1 / (i + 1):.6f}" for i in range(30)]
    for i, line in enumerate(expected):
        cluster.append_log(NS, pod, line, at=T0 * SECOND + i * 1_000_000)
    burst = [f"burst line {i} at one and the same instant" for i in range(10)]  # more than a window
    cluster.append_log(NS, pod, *burst, at=(T0 + 1) * SECOND)
    expected += burst
    got: list[str] = []
    cursor = None
    for _ in range(40):
        lines, cursor = one.logs(record, cursor)
        if not lines:
            break
        assert len(lines) < len(expected)  # it did come in windows
        got += lines
    assert got == expected


def test_a_single_rank_log_is_untagged_and_a_pod_not_started_has_no_log_yet(
    cluster, backend, tmp_path
) -> None:
    one = backend()
    record = launch(one, make_record(tmp_path))
    assert one.logs(record, None) == ([], {"pods": {}})
    (pod,) = pods_of(cluster, record)
    cluster.set_pod_waiting(NS, pod, "ContainerCreating", "")
    assert one.logs(record, None) == ([], {"pods": {}})
    assert cluster.count("get", "pods/log") == 0
    cluster.set_pod_phase(NS, pod, "Running")
    # The pod's phase ran ahead of its container (a race the kubelet allows): the API answers 400.
    cluster.set_pod_waiting(NS, pod, "ContainerCreating", "")
    assert one.logs(record, None) == ([], {"pods": {}})
    assert cluster.count("get", "pods/log") == 1
    cluster.set_pod_phase(NS, pod, "Running")
    line = "LOG Sat Nov 22 10:00:00 2025 - (0, 1) step_loss : 0.51 learning_rate : 4.0e-04 throughput : 12.5"
    cluster.append_log(NS, pod, line)
    assert one.logs(record, None)[0] == [line]


def test_follow_streams_lines_as_they_arrive_and_ends_with_the_job(cluster, backend, tmp_path) -> None:
    one = backend()
    record = launch(one, make_record(tmp_path, nnodes=2))
    rank0, rank1 = pods_of(cluster, record)
    cluster.set_pod_phase(NS, rank0, "Running")
    cluster.append_log(NS, rank0, "before the follow")
    got: list[tuple[float, list[str], dict]] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            for lines, cursor in one.follow(record, None, poll_s=0.2):
                got.append((time.monotonic(), lines, cursor))
        except BaseException as exc:
            errors.append(exc)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    until(lambda: [line for _, lines, _ in got for line in lines], lambda lines: len(lines) == 1)
    cluster.set_pod_phase(NS, rank1, "Running")
    written = time.monotonic()
    cluster.append_log(NS, rank1, "rank one speaks")
    until(lambda: len(got), lambda n: n >= 2)
    assert got[1][1] == ["[rank 1] rank one speaks"] and got[1][0] - written < 2.5
    cluster.append_log(NS, rank0, "step 1", "step 2")
    until(lambda: sum(len(lines) for _, lines, _ in got), lambda n: n == 4)
    assert reader.is_alive()
    cluster.set_pod_phase(NS, rank0, "Succeeded")
    cluster.set_pod_phase(NS, rank1, "Succeeded")
    reader.join(timeout=10)
    assert not reader.is_alive() and errors == []
    followed = [line for _, lines, _ in got for line in lines]
    assert followed == [
        "[rank 0] before the follow",
        "[rank 1] rank one speaks",
        "[rank 0] step 1",
        "[rank 0] step 2",
    ]
    last_cursor = got[-1][2]
    assert backend().logs(record, json.loads(json.dumps(last_cursor))) == ([], last_cursor)
    assert sorted(backend().logs(record, None)[0]) == sorted(followed)


def test_closing_leaves_no_watch_or_log_thread_behind(cluster, backend, tmp_path) -> None:
    before = set(threading.enumerate())

    def ours() -> list[str]:
        return sorted(t.name for t in set(threading.enumerate()) - before if t.name.startswith("k8s-"))

    one = backend()
    record = launch(one, make_record(tmp_path))
    (pod,) = pods_of(cluster, record)
    cluster.set_pod_phase(NS, pod, "Running")
    cluster.append_log(NS, pod, "hello")
    one.status(record)  # a pod watch
    follower = one.follow(record, None, poll_s=0.1)
    assert next(follower)[0] == ["hello"]  # a log stream, still open
    assert ours() == [f"k8s-log-{pod}", "k8s-pods-bert-a1b2c3d4"]
    follower.close()
    one.close()
    until(ours, lambda names: not names)


# ---- stop ----


def test_stop_deletes_everything_and_status_then_says_stopped(cluster, backend, tmp_path) -> None:
    one = backend()
    record = launch(one, make_record(tmp_path, nnodes=2))
    for pod in pods_of(cluster, record):
        cluster.set_pod_phase(NS, pod, "Running")
    one.status(record)
    stopping = one.stop(record)
    assert stopping.state == "stopping"
    now = pytest.approx(time.time(), abs=5)
    assert stopping.handle == {**record.handle, "stop_requested": True, "stop_requested_at": now}
    assert [cluster.list(kind, NS) for kind in ("jobs", "services", "configmaps", "pods")] == [[], [], [], []]
    assert any(
        "propagationPolicy=Background" in path for verb, _, path in cluster.requests if verb == "delete"
    )
    stopped = backend().status(replace(record, handle=stopping.handle))
    assert stopped.state == "stopped" and stopped.ended_at == stopping.handle["stop_requested_at"]


# ---- a cluster that fails or refuses ----


def test_a_storm_of_5xx_and_429_is_survived(cluster, backend, tmp_path) -> None:
    cluster.fail_next(2, 503, verb="create", plural="jobs")
    cluster.fail_next(1, 500, verb="create", plural="configmaps")
    cluster.fail_next(1, 429, verb="patch", plural="jobs")
    cluster.fail_next(3, 502, verb="get", plural="jobs")
    one = backend()
    record = launch(one, make_record(tmp_path))
    assert one.status(record).state == "running"
    assert [
        cluster.count(v, p) for v, p in [("create", "jobs"), ("create", "configmaps"), ("patch", "jobs")]
    ] == [3, 2, 2]
    assert cluster.count("get", "jobs") == 4
    assert len(cluster.list("jobs", NS)) == 1


def test_a_repeated_create_goes_on_over_its_own_objects_but_not_over_anothers(
    cluster, backend, tmp_path
) -> None:
    one = backend()
    record = make_record(tmp_path)
    first = one.submit(record)
    # As when a create went through but its answer was lost: AlreadyExists, and the objects are this run's.
    assert one.submit(record).handle == first.handle
    assert len(cluster.list("jobs", NS)) == len(cluster.list("configmaps", NS)) == 1
    with pytest.raises(UsageError) as err:
        one.submit(make_record(tmp_path, run_id="A1B2C3D4"))  # another run, the same Job name
    assert str(err.value) == (
        "Kubernetes jobs bert-a1b2c3d4 already exists in namespace ml and is not this run's; "
        "delete it or launch with another --name"
    )
    assert cluster.get("jobs", NS, "bert-a1b2c3d4")["metadata"]["labels"]["trnconsole/run-id"] == "a1b2c3d4"


def test_a_storm_longer_than_the_attempts_is_one_line(cluster, backend, tmp_path) -> None:
    one = backend()
    record = launch(one, make_record(tmp_path))
    cluster.fail_next(10, 503, verb="get", plural="jobs")
    with pytest.raises(UsageError) as err:
        one.status(record)
    assert str(err.value) == (
        "Kubernetes get jobs in namespace ml failed after 6 attempts: 503 synthetic 503; "
        "the API server is overloaded or unavailable, try again later"
    )
    assert cluster.count("get", "jobs") == 6


def test_forbidden_is_one_line_naming_the_verb_and_resource_and_is_not_retried(
    cluster, backend, tmp_path
) -> None:
    cluster.forbid("create", "jobs")
    with pytest.raises(UsageError) as err:
        backend().submit(make_record(tmp_path))
    assert str(err.value) == (
        'Kubernetes denied create jobs in namespace ml: jobs.batch is forbidden: User "tester" cannot create '
        'resource "jobs" in API group "batch" in the namespace "ml"; ask the cluster admin to allow it '
        "(`kubectl auth can-i create jobs -n ml`)"
    )
    assert cluster.count("create", "jobs") == 1


def test_a_refused_configmap_takes_the_job_created_before_it_away(cluster, backend, tmp_path) -> None:
    cluster.forbid("create", "configmaps")
    with pytest.raises(UsageError, match=r"^Kubernetes denied create configmaps in namespace ml: "):
        backend().submit(make_record(tmp_path))
    assert cluster.count("create", "jobs") == 1
    assert [cluster.list(kind, NS) for kind in ("jobs", "pods", "configmaps")] == [[], [], []]


def test_an_unreachable_api_server_is_retried_then_one_line(cluster, backend, tmp_path) -> None:
    config = json.loads((tmp_path / "kubeconfig").read_text())
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"  # the discard port: nothing listens
    (tmp_path / "kubeconfig").write_text(json.dumps(config))
    record = make_record(tmp_path)
    with pytest.raises(UsageError) as err:
        backend().submit(record)
    text = str(err.value)
    assert text.startswith("Kubernetes API of context fake: cannot reach it after 6 attempts to create jobs ")
    assert text.endswith("; check the network and the server in the kubeconfig") and "\n" not in text
    assert cluster.token not in text


def test_rejected_credentials_are_one_line_without_the_token(cluster, backend, tmp_path) -> None:
    config = json.loads((tmp_path / "kubeconfig").read_text())
    config["users"][0]["user"]["token"] = "expired-" + cluster.token
    (tmp_path / "kubeconfig").write_text(json.dumps(config))
    with pytest.raises(UsageError) as err:
        backend().submit(make_record(tmp_path))
    assert str(err.value) == (
        "Kubernetes rejected the credentials of context fake to create jobs in namespace ml; refresh them "
        "(on EKS: `aws eks update-kubeconfig --name CLUSTER`)"
    )


def test_clients_are_made_once_per_kubeconfig_and_context(cluster, tmp_path) -> None:
    made: list[tuple[str | None, str | None]] = []

    def factory(kubeconfig: str | None, context: str | None) -> Any:
        made.append((kubeconfig, context))
        return load_client(kubeconfig, context)

    one = KubernetesBackend(factory, retry_base_s=0.01)
    try:
        record = launch(one, make_record(tmp_path))
        one.status(record)
        one.logs(record, None)
        one.stop(record)
    finally:
        one.close()
    assert made == [(str((tmp_path / "kubeconfig").resolve()), "fake")]


# ---- through the CLI, as a user sees it ----


def test_the_cli_launches_mirrors_streams_and_stops_a_k8s_run(cluster, tmp_path, monkeypatch, capsys) -> None:
    from trnconsole.cli import main
    from trnconsole.service import Console

    home = tmp_path / "home"
    monkeypatch.setenv("TRNCONSOLE_HOME", str(home))
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    script = tmp_path / "train.py"
    script.write_text("print('step')\n")
    assert main(["launch", str(script), "--backend", "k8s", "--nnodes", "2", "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["id"]
    job = Console(home).store.get(run_id).handle["job"]
    rank0, rank1 = (p["metadata"]["name"] for p in cluster.job_pods(NS, job))
    for pod in (rank0, rank1):
        cluster.set_pod_phase(NS, pod, "Running")
    cluster.append_log(NS, rank0, "LOG Sun Nov 22 07:42:44 2026 - (0, 1) step_loss : 0.9000")

    assert main(["logs", run_id]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "[rank 0] LOG Sun Nov 22 07:42:44 2026 - (0, 1) step_loss : 0.9000"
    ]

    # `logs -f` prints the mirror up to its cursor, then streams every rank from there on.
    follower = threading.Thread(target=main, args=(["logs", "-f", run_id],), daemon=True)
    follower.start()
    time.sleep(1.0)
    cluster.append_log(NS, rank1, "rank one joins")
    cluster.append_log(NS, rank0, "LOG Sun Nov 22 07:42:45 2026 - (0, 2) step_loss : 0.8000")
    time.sleep(1.0)
    for pod in (rank0, rank1):
        cluster.set_pod_phase(NS, pod, "Succeeded")
    follower.join(timeout=20)
    assert not follower.is_alive()
    streamed = capsys.readouterr().out.splitlines()
    assert streamed[0] == "[rank 0] LOG Sun Nov 22 07:42:44 2026 - (0, 1) step_loss : 0.9000"
    assert sorted(streamed[1:]) == [
        "[rank 0] LOG Sun Nov 22 07:42:45 2026 - (0, 2) step_loss : 0.8000",
        "[rank 1] rank one joins",
    ]
    assert main(["show", run_id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "completed" and shown["summary"]["step"] == 2


def test_the_cli_stops_a_k8s_run_and_reports_it_stopped_once_the_job_is_gone(
    cluster, tmp_path, monkeypatch, capsys
) -> None:
    from trnconsole.cli import main

    monkeypatch.setenv("TRNCONSOLE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRNCONSOLE_CONFIG", str(tmp_path / "none.toml"))
    script = tmp_path / "train.py"
    script.write_text("print('step')\n")
    assert main(["launch", str(script), "--backend", "k8s", "--json"]) == 0
    run_id = json.loads(capsys.readouterr().out)["id"]
    assert main(["stop", run_id]) == 0
    assert capsys.readouterr().out.strip() == f"{run_id} stopping"
    assert main(["show", run_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "stopped"
