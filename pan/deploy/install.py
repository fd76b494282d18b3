"""`pan deploy install`: the project's wheel, a wheelhouse of its requirements, the workflow and its files on
every host, and a venv there that installs offline from them.

The wheelhouse is built once from the versions installed in this venv (``pip wheel --no-deps`` into a cache
folder reused across runs), so the hosts need no package index. Copies skip files a host already has with the
same size, so a second install copies only the project's wheel and the workflow.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

from pan.deploy.inventory import HostSpec, Inventory
from pan.deploy.ssh import Connection, HostError, q

CACHE = Path(os.environ.get("PAN_DEPLOY_CACHE", Path.home() / ".cache" / "pan-deploy"))
WORKFLOW_NAME = "workflow.json"
SECRET_NAME = "pan.secret"
TLS_DIR = "tls"  # on every host: the CA, and that host's own certificate and key (mode 0600)
BUILD_TIMEOUT_S = 600


class InstallError(Exception):
    """A local step failed (building the wheel or the wheelhouse, reading the secret); one line."""


@dataclass
class Bundle:
    """What every host gets: wheels, the deployed workflow, its secret (if any) and data files."""

    wheel: Path
    wheelhouse: list[Path]
    workflow: Path
    secret: Path | None
    files: list[Path]
    tls: TlsBundle | None = None


@dataclass
class TlsBundle:
    """The workflow's CA, and per host address the certificate and key its servers present."""

    ca: Path
    certs: dict[str, tuple[Path, Path]]


def requirements(name: str = "pan") -> dict[str, str]:
    """Every distribution ``name`` needs at run time (no extras), with the version installed here."""
    found: dict[str, str] = {}
    todo = [name]
    while todo:
        dist = distribution(todo.pop())
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            key = req.name.lower().replace("_", "-")
            if key in found:
                continue
            try:
                found[key] = distribution(req.name).version
            except PackageNotFoundError:
                raise InstallError(f"{req.name} (needed by {dist.metadata['Name']}) is not installed here") from None
            todo.append(req.name)
    return found


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S, check=False)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip() and "WARNING" not in line]
        raise InstallError(f"pip {args[0]} failed: {(lines or ['no output'])[-1]}")


def wheelhouse() -> list[Path]:
    """Wheels of the requirements, built once per Python version into the cache and reused."""
    folder = CACHE / f"wheelhouse-py{sys.version_info.major}{sys.version_info.minor}"
    folder.mkdir(parents=True, exist_ok=True)
    wanted = requirements()
    have = {_wheel_key(p) for p in folder.glob("*.whl")}
    missing = [f"{name}=={version}" for name, version in sorted(wanted.items())
               if (_norm(name), version) not in have]
    if missing:
        _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(folder), *missing)
    wheels = [p for p in folder.glob("*.whl") if _wheel_key(p) in {(_norm(n), v) for n, v in wanted.items()}]
    return sorted(wheels)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _wheel_key(path: Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return _norm(name), version


def build_wheel(project: Path) -> Path:
    """The project's own wheel, built fresh (its code may have changed without a new version)."""
    if not (project / "pyproject.toml").is_file():
        raise InstallError(f"{project} is not the project's folder (no pyproject.toml); give --project")
    out = CACHE / "project"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(project))
    wheels = sorted(out.glob("*.whl"))
    if not wheels:
        raise InstallError(f"pip wheel {project} made no wheel")
    return wheels[0]


def project_folder() -> Path:
    """The checkout this PAN runs from (an editable install), the default ``--project``."""
    return Path(__file__).resolve().parents[2]


def bundle(inventory: Inventory, workflow_path: Path, workflow: dict[str, Any], project: Path,
           stage: Path) -> Bundle:
    """Build and stage everything the hosts get; the secret is staged with mode 0600."""
    deployed = inventory.deployed_workflow(workflow)
    secret = _stage_secret(workflow_path, workflow.get("auth"), stage)
    if secret is not None:
        deployed["auth"] = {"secret_file": SECRET_NAME}
    tls = tls_files(inventory, workflow_path, workflow.get("tls"), stage)
    if tls is not None:
        deployed["tls"] = {"ca": f"{TLS_DIR}/ca.pem", "cert": f"{TLS_DIR}/{{host}}.pem",
                           "key": f"{TLS_DIR}/{{host}}.key"}
    target = stage / WORKFLOW_NAME
    target.write_text(json.dumps(deployed, indent=1))
    return Bundle(build_wheel(project), wheelhouse(), target, secret, inventory.files, tls)


def tls_files(inventory: Inventory, workflow_path: Path, raw: object, stage: Path) -> TlsBundle | None:
    """The workflow's ``tls`` files for every host of the inventory that serves something (by address, as the
    deployed workflow names its servers), staged under the names the deployed workflow gives them (keys 0600);
    None without ``tls``."""
    if not isinstance(raw, dict):
        return None
    from pan.security.tls import TlsFiles

    files = TlsFiles(Path(str(raw["ca"])), str(raw["cert"]), str(raw["key"])).resolved(workflow_path.resolve().parent)
    certs = {h.address: files.cert_for(h.address) for h in inventory.hosts.values() if h.peers or h.repository}
    missing = [str(f) for f in [files.ca, *(f for pair in certs.values() for f in pair)] if not f.is_file()]
    if missing:
        raise InstallError(f"the workflow's TLS files are missing: {', '.join(missing)} (`pan deploy certs "
                           "INVENTORY --out DIR` makes them)")
    folder = stage / TLS_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    staged = {}
    for address, (cert, key) in certs.items():
        staged[address] = (_stage_copy(cert, folder / f"{address}.pem"), _stage_copy(key, folder / f"{address}.key",
                                                                                    0o600))
    return TlsBundle(_stage_copy(files.ca, folder / "ca.pem"), staged)


def _stage_copy(source: Path, target: Path, mode: int = 0o644) -> Path:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(source.read_bytes())
    return target


def make_certs(inventory: Inventory, out: Path, days: int = 30) -> dict[str, str]:
    """A private CA and a certificate per host address of the inventory (pan/security/tls.py): the ``tls``."""
    from pan.security.tls import TlsError, make_certificates

    try:
        files = make_certificates(out, sorted({h.address for h in inventory.hosts.values()}), days=days)
    except TlsError as exc:
        raise InstallError(str(exc)) from None
    return {"ca": str(files.ca), "cert": files.cert, "key": files.key}


def _stage_secret(workflow_path: Path, auth: object, stage: Path) -> Path | None:
    if not isinstance(auth, dict):
        return None
    if "secret_file" in auth:
        source = workflow_path.resolve().parent / str(auth["secret_file"])
        try:
            data = source.read_bytes()
        except OSError as exc:
            raise InstallError(f"the workflow's secret file {source}: {exc.strerror or exc}") from None
    else:
        value = os.environ.get(str(auth.get("secret_env")))
        if value is None:
            raise InstallError(f"the workflow's secret variable {auth.get('secret_env')} is not set here")
        data = value.encode()
    target = stage / SECRET_NAME
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return target


def remote_venv(host: HostSpec) -> str:
    return f"{host.dir}/venv"


async def check_host(conn: Connection) -> None:
    """Python (the wheelhouse's version) and, where Spark runs, Java 17+: ``HostError`` if missing."""
    host = conn.host
    want = f"{sys.version_info.major}.{sys.version_info.minor}"
    found = await conn.run(f"{q(host.python)} -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'",
                           check=False, timeout_s=30)
    if found.exit_status != 0:
        raise HostError(host.name, f"no Python: `{host.python}` is missing (install Python {want} there, or set "
                                   "the host's \"python\" in the inventory)")
    if found.stdout.strip() != want:
        raise HostError(host.name, f"`{host.python}` is Python {found.stdout.strip()}; the wheelhouse is for {want}")
    if host.java:
        java = await conn.run("java -version 2>&1", check=False, timeout_s=30)
        match = re.search(r'version "(\d+)', java.stdout)
        if java.exit_status != 0 or match is None or int(match.group(1)) < 17:
            raise HostError(host.name, "Spark runs here but Java 17+ is missing (apt-get install "
                                       "openjdk-17-jre-headless)")


async def _copy_missing(conn: Connection, files: list[Path], remote_dir: str) -> None:
    listing = await conn.run(f"mkdir -p {q(remote_dir)} && cd {q(remote_dir)} && "
                             "for f in *; do [ -f \"$f\" ] && echo \"$(stat -c %s \"$f\") $f\"; done; true")
    have = {line.split(" ", 1)[1]: int(line.split(" ", 1)[0]) for line in listing.stdout.splitlines() if " " in line}
    await conn.put([f for f in files if have.get(f.name) != f.stat().st_size], remote_dir)


async def install_host(conn: Connection, b: Bundle) -> str:
    """Everything on one host; a one-line summary."""
    host = conn.host
    await check_host(conn)
    await _copy_missing(conn, b.wheelhouse, f"{host.dir}/wheels")
    await conn.put([b.wheel], f"{host.dir}/wheels")
    await conn.run(f"mkdir -p {q(host.dir)}/logs {q(host.dir)}/run")
    await conn.put([b.workflow, *b.files], host.dir)
    if b.secret is not None:
        await conn.put([b.secret], host.dir, mode=0o600)
    if b.tls is not None:
        await _put_tls(conn, b.tls)
    venv = remote_venv(host)
    pip = f"{q(venv)}/bin/python -m pip install --quiet --disable-pip-version-check --no-index " \
          f"--find-links {q(host.dir)}/wheels"
    wheel = f"{q(host.dir)}/wheels/{q(b.wheel.name)}"
    await conn.run(f"[ -x {q(venv)}/bin/python ] || {q(host.python)} -m venv {q(venv)}", timeout_s=300)
    await conn.run(f"{pip} {wheel} && {pip} --no-deps --force-reinstall {wheel}", timeout_s=600)
    return f"{host.name}: installed in {host.dir} ({', '.join(host.peers) or 'no peers'}" \
           f"{', repository' if host.repository else ''})"


async def _put_tls(conn: Connection, tls: TlsBundle) -> None:
    """The CA on every host; a host's own certificate and key (0600) where it serves something."""
    folder = f"{conn.host.dir}/{TLS_DIR}"
    await conn.run(f"mkdir -p {q(folder)} && chmod 700 {q(folder)}")
    await conn.put([tls.ca], folder)
    if conn.host.address in tls.certs:
        cert, key = tls.certs[conn.host.address]
        await conn.put([cert], folder)
        await conn.put([key], folder, mode=0o600)


def stage_dir() -> tempfile.TemporaryDirectory[str]:
    CACHE.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix="stage-", dir=CACHE)
