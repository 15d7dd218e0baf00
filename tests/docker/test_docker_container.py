"""Container smoke test: the image serves the playground under Docker's defaults, sandbox and all.

One container (default seccomp profile, no added capabilities, non-root) answers a gallery snippet,
contains a handful of hostile ones, and keeps short links in its /data volume across a restart.
"""

from __future__ import annotations

import json
import secrets

import httpx
import pytest
import torch
from dockerkit import Container, Image, docker, start, stop, wait_answering

from app.gallery import EXAMPLES

CLONE_DETACH = next(example for example in EXAMPLES if example.slug == "clone-vs-detach").code


def run(container: Container, code: str) -> httpx.Response:
    return httpx.post(f"{container.url}/api/run", json={"code": code}, timeout=60)


def last_step(body: dict) -> dict:
    assert body["steps"], body
    return body["steps"][-1]


def test_runs_under_dockers_defaults_as_non_root(container: Container) -> None:
    host = json.loads(docker("inspect", "--format", "{{json .HostConfig}}", container.id).stdout)
    assert not host["Privileged"]
    assert not host["CapAdd"]
    assert not host["SecurityOpt"]  # nothing like seccomp=unconfined
    find_server = ("import os; print(*(p for p in os.listdir('/proc') if p.isdigit() "
                   "and b'-m\\0app\\0serve' in open(f'/proc/{p}/cmdline', 'rb').read()))")
    server_pids = container.exec("python", "-c", find_server).stdout.split()
    assert server_pids
    for pid in ["1", *server_pids]:  # dumb-init and the server
        status = container.exec("cat", f"/proc/{pid}/status").stdout
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        assert fields["Seccomp"].strip() == "2"  # Docker's default filter is in force on the server
        assert fields["Uid"].split()[0] == "10001"
        assert int(fields["CapEff"].strip(), 16) == 0  # a non-root user keeps no capabilities


def test_healthcheck_command_passes(image: Image, container: Container) -> None:
    config = docker("image", "inspect", "--format", "{{json .Config.Healthcheck}}", image.tag).stdout
    check = json.loads(config)
    assert container.exec(*check["Test"][1:]).returncode == 0


def test_healthz_reports_every_required_sandbox_layer_active(container: Container) -> None:
    """Issue 3 inside Docker: default seccomp profile, no added capabilities, non-root server."""
    response = httpx.get(f"{container.url}/healthz", timeout=10)
    body = response.json()
    assert response.status_code == 200, body
    assert body["ok"] is True and body["runner"] == "forkserver" and body["unsafe_dev"] is False
    assert body["missing"] == [], body
    # A non-root server relies on Landlock (not a separate uid) to hide its files from children.
    expected = {"fork_server", "clean_env", "seccomp", "no_new_privs", "not_dumpable", "rlimits",
                "no_file_writes", "landlock"}
    assert expected <= set(body["required"])
    assert {name: body["layers"].get(name) for name in expected} == dict.fromkeys(expected, True)
    assert body["landlock_abi"] >= 1
    assert body["policy_gate"] is True


def test_gallery_snippet_matches_torch(container: Container) -> None:
    response = run(container, CLONE_DETACH)
    assert response.status_code == 200
    body = response.json()
    assert body["ok"], body["error"]
    step = last_step(body)
    tensor = {name: step["tensors"][tid] for name, tid in step["variables"].items()}
    # torch (here, outside the container) is the oracle for what the trace must say.
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    c, d = x.clone(), x.detach()
    assert tensor["c"]["storage"] != tensor["x"]["storage"]  # clone: new memory
    assert tensor["d"]["storage"] == tensor["x"]["storage"]  # detach: same memory
    assert (c.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()) is False
    assert d.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert step["nodes"][tensor["c"]["grad_fn"]]["name"] == type(c.grad_fn).__name__
    assert tensor["d"]["grad_fn"] is None and tensor["d"]["requires_grad"] is d.requires_grad
    assert tensor["c"]["values"] == c.tolist()
    assert str(c.grad_fn).split(" ")[0].lstrip("<") in step["stdout"]


# Each: (snippet, what must not appear in the answer, a path that must not exist afterwards).
HOSTILE = {
    "os.system": ("torch.os.system('touch /tmp/pwned-system')\n", None, "/tmp/pwned-system"),
    "write the data volume": (
        "f = torch.builtins.open('/data/pwned', 'w')\nf.write('x')\nf.close()\n", None, "/data/pwned"),
    "read /etc/passwd": ("print(torch.builtins.open('/etc/passwd').read())\n", "root:x:0:0", None),
    "read the server's source": (
        "print(torch.builtins.open('/app/app/config.py').read())\n", "class Settings", None),
    "environment": ("print(dict(torch.os.environ))\n", "{secret}", None),
    "/proc/self/environ": ("print(torch.builtins.open('/proc/self/environ').read())\n", "{secret}", None),
    "the server's environ": ("print(torch.builtins.open('/proc/1/environ').read())\n", "{secret}", None),
    "socket to the server": (
        "s = torch.importlib.import_module('socket').create_connection(('127.0.0.1', 8000))\n"
        "s.sendall(b'GET /healthz?from-the-snippet HTTP/1.0\\r\\n\\r\\n')\nprint(s.recv(100))\n",
        "HTTP/1", None),
}


@pytest.mark.parametrize("gate", ["container", "gateless"])
@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_snippet_is_contained(request: pytest.FixtureRequest, gate: str, name: str) -> None:
    container: Container = request.getfixturevalue(gate)
    code, leak, path = HOSTILE[name]
    response = run(container, code)
    assert response.status_code in (200, 413, 422, 429), response.text
    if leak:
        assert leak.replace("{secret}", container.secret) not in response.text
    if path:
        assert container.exec("test", "-e", path).returncode == 1, f"{path} was created"
    assert "from-the-snippet" not in docker("logs", container.id, check=False).stderr
    # And the server still answers a benign run correctly afterwards.
    benign = run(container, "a = torch.ones(2)\nb = a * 3\n").json()
    assert benign["ok"], benign["error"]
    step = last_step(benign)
    assert step["tensors"][step["variables"]["b"]]["values"] == (torch.ones(2) * 3).tolist()


def test_playground_refuses_to_be_framed(container: Container) -> None:
    response = httpx.get(f"{container.url}/", timeout=10)
    assert response.status_code == 200
    csp = response.headers.get("content-security-policy", "")
    assert "frame-ancestors 'none'" in csp and response.headers.get("x-frame-options", "").upper() == "DENY"
    assert "default-src 'self'" in csp  # the page's own policy is kept


def test_embed_may_be_framed_by_other_sites(container: Container) -> None:
    response = httpx.get(f"{container.url}/embed", timeout=10)
    assert response.status_code == 200
    csp = response.headers.get("content-security-policy", "")
    assert "frame-ancestors" in csp and "'none'" not in csp.split("frame-ancestors", 1)[1].split(";")[0]
    assert "x-frame-options" not in response.headers


def test_short_links_survive_a_container_restart_in_the_data_volume(image: Image) -> None:
    volume = f"explorer-smoke-{secrets.token_hex(4)}"
    try:
        first = start(image, volume)
        try:
            made = httpx.post(f"{wait_answering(first)}/api/links", json={"code": CLONE_DETACH}, timeout=10)
            assert made.status_code == 200, made.text
        finally:
            stop(first)
        second = start(image, volume)
        try:
            url = wait_answering(second)
            read = httpx.get(f"{url}/api/links/{made.json()['id']}", timeout=10)
            assert read.status_code == 200 and read.json()["code"] == CLONE_DETACH
            assert httpx.get(f"{url}{made.json()['url']}", timeout=10).status_code == 303
        finally:
            stop(second)
    finally:
        docker("volume", "rm", "-f", volume, check=False)
