"""Values the chart rendered into a pod, a monitor or a test that could not work, now refused at
render time with the value to set (or handled), each rendered by the real helm binary:

* a ``sidecar.env`` entry naming a variable the chart sets itself (it came after the chart's, so
  the pod held the name twice and the user's silently won, past the chart's checks);
* a monitor's ``scrapeTimeout`` longer than its ``interval`` (Prometheus refuses the scrape config);
* an integer past what a values file holds exactly (Helm reads its numbers as float64: past int64
  one rendered as -9223372036854775808);
* a tmpfs cache whose size plus the sidecar's memory request is not below its memory limit;
* ``metrics.serviceMonitor`` without ``metrics.enabled`` (nothing rendered, nothing said);
* the ``helm test`` pod's script with no training pod behind the Service (getaddrinfo raised
  before the script could say so).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helm_helpers import (
    CHART,
    NAMESPACE,
    RELEASE,
    container,
    env_of,
    helm,
    one,
    pod_spec,
    refused,
    render,
    with_remote,
)

GI = 1024**3
MI = 1024**2


# --------------------------------------------------------------------------- sidecar.env


@pytest.mark.parametrize(("name", "instead"), [
    ("EPOCHFS_CAPACITY", "set cache.capacity"),
    ("EPOCHFS_HEALTH_PORT", "set sidecar.healthPort"),
    ("EPOCHFS_MOUNT", "set sidecar.mountPath"),
    ("EPOCHFS_VIEW", "set sidecar.view"),
    ("EPOCHFS_METRICS_PORT", "set sidecar.healthPort"),
    ("EPOCHFS_SEED", "set sidecar.seed"),
    ("HOME", "leave HOME to the chart"),
    ("POD_NAME", "leave it to the chart"),
])
def test_sidecar_env_naming_a_chart_variable_is_refused(helm_bin: Path, tmp_path: Path, name: str,
                                                         instead: str) -> None:
    err = refused(helm_bin, {"sidecar": {"env": [{"name": "EPOCHFS_RETRIES", "value": "3"},
                                                 {"name": name, "value": "9090"}]}}, tmp_path)
    assert f"sidecar.env: {name} is the chart's own to set" in err and instead in err, err


def test_every_variable_the_chart_sets_in_the_sidecar_is_refused_in_sidecar_env(helm_bin: Path,
                                                                                 tmp_path: Path) -> None:
    """Whatever the chart renders into the sidecar's env (with every optional variable on) cannot
    come again from sidecar.env; the pod then never holds a name twice."""
    rich: dict[str, Any] = {"remote": {"endpointUrl": "https://minio.example:9000", "indexUrl": "https://h/index.txt",
                       "include": "*.npy", "exclude": "*.json",
                       "credentials": {"secretName": "s3", "mode": "files",
                                       "fileEnv": {"AWS_SHARED_CREDENTIALS_FILE": "credentials"}}},
            "sidecar": {"view": "folder", "schedule": "initial=10"}}
    names = list(env_of(container(pod_spec(render(helm_bin, with_remote(rich), tmp_path)), "epochfs")))
    assert {"EPOCHFS_CAPACITY", "EPOCHFS_SCHEDULE", "AWS_SHARED_CREDENTIALS_FILE", "NODE_NAME"} <= set(names)
    for name in names:
        values = {**rich, "sidecar": {**rich["sidecar"], "env": [{"name": name, "value": "1"}]}}
        assert f"sidecar.env: {name} is the chart's own to set" in refused(helm_bin, values, tmp_path), name


def test_sidecar_env_of_other_names_renders_once_each(helm_bin: Path, tmp_path: Path) -> None:
    extra = [{"name": "EPOCHFS_RETRIES", "value": "3"}, {"name": "EPOCHFS_LOG_LEVEL", "value": "DEBUG"}]
    objs = render(helm_bin, with_remote({"sidecar": {"env": extra}}), tmp_path)
    side = container(pod_spec(objs), "epochfs")
    names = [e["name"] for e in side["env"]]
    assert len(names) == len(set(names)) and side["env"][-2:] == extra
    # The downward-API names are the chart's only while kube reporting is on.
    values = {"kubeReporting": {"enabled": False}, "sidecar": {"env": [{"name": "POD_NAME", "value": "x"}]}}
    side = container(pod_spec(render(helm_bin, with_remote(values), tmp_path)), "epochfs")
    assert env_of(side)["POD_NAME"] == "x"


# --------------------------------------------------------------------------- scrape timeout


@pytest.mark.parametrize("monitor", ["serviceMonitor", "podMonitor"])
@pytest.mark.parametrize(("interval", "timeout"), [("30s", "31s"), ("1m", "60001ms"), ("1h", "1h1s"),
                                                   ("1m30s", "2m"), ("10s", "1d")])
def test_a_scrape_timeout_longer_than_the_interval_is_refused(helm_bin: Path, tmp_path: Path, monitor: str,
                                                              interval: str, timeout: str) -> None:
    values = {"metrics": {monitor: {"enabled": True, "interval": interval, "scrapeTimeout": timeout}}}
    err = refused(helm_bin, values, tmp_path)
    assert f"metrics.{monitor}.scrapeTimeout {timeout} is longer than its interval {interval}" in err, err


@pytest.mark.parametrize("monitor", ["serviceMonitor", "podMonitor"])
@pytest.mark.parametrize(("interval", "timeout"), [("30s", "30s"), ("1m", "59s999ms"), ("1m30s", "90s"),
                                                   ("", "2m"), ("5s", "")])
def test_a_scrape_timeout_within_the_interval_renders(helm_bin: Path, tmp_path: Path, monitor: str,
                                                      interval: str, timeout: str) -> None:
    values = {"metrics": {monitor: {"enabled": True, "interval": interval, "scrapeTimeout": timeout}}}
    objs = render(helm_bin, with_remote(values), tmp_path)
    kind = monitor[0].upper() + monitor[1:]
    spec = one(objs, kind)["spec"]
    endpoint = (spec.get("endpoints") or spec["podMetricsEndpoints"])[0]
    assert endpoint.get("scrapeTimeout", "") == timeout and endpoint.get("interval", "") == interval


# --------------------------------------------------------------------------- integers past a float64


BIG = "99999999999999999999"  # 1e20 as Helm reads it: past int64 (and past 2^53)


@pytest.mark.parametrize(("path", "value", "bound"), [
    ("sidecar.minSamples", BIG, "maximum"),
    ("sidecar.seed", BIG, "maximum"),
    ("sidecar.seed", f"-{BIG}", "minimum"),
    ("sidecar.keepEpochs", BIG, "maximum"),
    ("sidecar.startupTimeoutSeconds", BIG, "maximum"),
    ("terminationGracePeriodSeconds", BIG, "maximum"),
    ("job.activeDeadlineSeconds", BIG, "maximum"),
    ("job.ttlSecondsAfterFinished", BIG, "maximum"),
    ("kubeReporting.statusIntervalSeconds", BIG, "maximum"),
])
def test_integers_past_int64_in_a_values_file_are_refused(helm_bin: Path, tmp_path: Path, path: str,
                                                           value: str, bound: str) -> None:
    """A bare YAML integer in a values file, as a user writes it (not --set, which reads int64)."""
    *parents, key = path.split(".")
    text = "".join(f"{'  ' * i}{p}:\n" for i, p in enumerate(parents))
    text += f"{'  ' * len(parents)}{key}: {value}\n"
    vfile = tmp_path / "big.yaml"
    vfile.write_text(f"remote:\n  url: s3://b/p\n{text}")
    proc = helm(helm_bin, "template", RELEASE, str(CHART), "-f", str(vfile), tmp=tmp_path, check=False)
    assert proc.returncode != 0 and f"{bound}: got" in proc.stderr, proc.stdout[-3000:] + proc.stderr
    assert "-9223372036854775808" not in proc.stdout


def test_the_largest_exact_seed_renders_as_written(helm_bin: Path, tmp_path: Path) -> None:
    for seed in (2**53 - 1, -(2**53 - 1)):
        vfile = tmp_path / "seed.yaml"
        vfile.write_text(f"remote:\n  url: s3://b/p\nsidecar:\n  seed: {seed}\n")
        proc = helm(helm_bin, "template", RELEASE, str(CHART), "-f", str(vfile), tmp=tmp_path)
        assert f'- name: EPOCHFS_SEED\n              value: "{seed}"' in proc.stdout, seed


# --------------------------------------------------------------------------- tmpfs cache


def test_a_tmpfs_cache_needs_a_limit_above_its_size_plus_the_request(helm_bin: Path, tmp_path: Path) -> None:
    """cache.volume.size 1Gi, request 512Mi: the limit must be above 1.5Gi, as the message says."""
    def values(limit: str, request: str | None = "512Mi") -> dict[str, Any]:
        resources: dict[str, Any] = {"limits": {"memory": limit}, "requests": {"memory": request}}
        return {"cache": {"volume": {"medium": "Memory", "size": "1Gi"}}, "sidecar": {"resources": resources}}

    for limit in ("1Gi", "1536Mi", "1.4Gi"):
        err = refused(helm_bin, values(limit), tmp_path)
        assert (f"sidecar.resources.limits.memory is {limit}, not above that size plus the sidecar's own "
                f"use (its memory request, 512Mi): {GI + 512 * MI} bytes in all") in err, err
    render(helm_bin, with_remote(values("1537Mi")), tmp_path)
    # Without a request only the size counts; a limit equal to it still leaves no room.
    assert "memory request, none set" in refused(helm_bin, values("1Gi", None), tmp_path)
    render(helm_bin, with_remote(values("1025Mi", None)), tmp_path)


# --------------------------------------------------------------------------- monitors without metrics


def test_a_service_monitor_without_metrics_is_refused(helm_bin: Path, tmp_path: Path) -> None:
    err = refused(helm_bin, {"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}}, tmp_path)
    assert "metrics.serviceMonitor.enabled needs metrics.enabled" in err and "metrics.podMonitor" in err, err
    # The PodMonitor needs no Service: it still renders without metrics.enabled.
    objs = render(helm_bin, with_remote({"metrics": {"enabled": False, "podMonitor": {"enabled": True}}}),
                  tmp_path)
    assert one(objs, "PodMonitor")


# --------------------------------------------------------------------------- helm test pod


def test_the_readyz_test_says_no_pod_is_behind_a_name_that_does_not_resolve(helm_bin: Path,
                                                                              tmp_path: Path) -> None:
    """No training pod: the headless Service's name has no DNS record (here, none at all), and the
    script must say so instead of dying in getaddrinfo."""
    pod = one(render(helm_bin, with_remote({}), tmp_path), "Pod")
    script = pod["spec"]["containers"][0]["command"][-1]
    host = f"{RELEASE}-epochfs.{NAMESPACE}.svc"
    script = script.replace(f'"{host}"', '"epochfs-no-such-host.invalid"')  # RFC 2606: never resolves
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == "no training pod behind epochfs-no-such-host.invalid", proc.stderr
