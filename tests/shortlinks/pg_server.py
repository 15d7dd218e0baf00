"""A real PostgreSQL server for the tests: the one CI started, or a throwaway cluster of our own.

CI (``.ci/run``) starts Debian's cluster and exports ``EXPLORER_TEST_DATABASE_URL``. Elsewhere, when
Debian's server binaries are installed, a private cluster is started in a temporary folder (as the
``postgres`` user when we are root, since PostgreSQL refuses to run as root). Each test gets its
own fresh database either way.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from psycopg import sql


class PostgresUnavailable(RuntimeError):
    pass


def _bindir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


@contextlib.contextmanager
def private_cluster() -> Iterator[str]:
    """initdb + pg_ctl in a temporary folder, trust auth, listening on a Unix socket in that folder
    only: no TCP port, so none that another process could take between choosing it and the server's
    start (a port found free beforehand is not held; pg_ctl then fails, and the tests skip)."""
    bindir = _bindir()
    if bindir is None:
        raise PostgresUnavailable("PostgreSQL server binaries (initdb) are not installed")
    root = Path(tempfile.mkdtemp(prefix="explorer-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data = root / "data"
    ctl = [*as_user, str(bindir / "pg_ctl"), "-D", str(data)]

    def run(command: list[str]) -> None:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise PostgresUnavailable(f"{Path(command[len(as_user)]).name} failed: {done.stderr[-500:]}")

    try:
        run([*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
             "-E", "UTF8", "--no-locale", "--no-sync"])
        options = f"-k {root} -c listen_addresses='' -c fsync=off -c full_page_writes=off"
        run([*ctl, "-l", str(root / "log"), "-o", options, "-w", "-t", "60", "start"])
        try:
            yield f"postgresql://postgres@/postgres?host={root}"
        finally:
            subprocess.run([*ctl, "-m", "immediate", "-w", "stop"], capture_output=True, timeout=60)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def check(admin_url: str) -> None:
    try:
        with psycopg.connect(admin_url, connect_timeout=5) as db:
            db.execute("SELECT 1")
    except psycopg.Error as error:
        raise PostgresUnavailable(f"cannot connect to the test server: {error}") from error


@contextlib.contextmanager
def fresh_database(admin_url: str) -> Iterator[str]:
    """CREATE DATABASE for one test, dropped afterwards; yields its postgresql:// URL."""
    name = f"explorer_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as db:
        db.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlsplit(admin_url)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as db:
            db.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
