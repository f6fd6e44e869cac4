"""The eks image (Dockerfile) runs as a non-root user that owns its home and the working
directory, and carries no credentials. These read the Dockerfile's instructions: no
image is built here (no Docker engine on the test machines)."""

import re
import shlex

import pytest

from tests.conftest import REPO


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    lines = [line for line in (REPO / "Dockerfile").read_text().splitlines() if not line.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in text.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
    return out


@pytest.fixture(scope="module")
def image():
    steps = _instructions()
    user = [args for word, args in steps if word == "USER"][-1]
    uid, _, gid = user.partition(":")
    env = {}
    for word, args in steps:
        if word == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(args))
    return {
        "steps": steps,
        "uid": uid,
        "gid": gid,
        "workdir": [args for word, args in steps if word == "WORKDIR"][-1],
        "runs": " && ".join(args for word, args in steps if word == "RUN"),
        "env": env,
    }


def test_the_last_user_is_numeric_and_not_root(image):
    assert image["uid"].isdigit() and int(image["uid"]) > 0, image["uid"]  # runAsNonRoot needs a number
    assert image["gid"].isdigit() and int(image["gid"]) > 0, image["gid"]
    assert image["steps"][-2][0] == "USER" and image["steps"][-1][0] == "CMD"  # nothing after it runs as root


def test_the_user_exists_with_its_home_as_HOME(image):
    uid, gid = image["uid"], image["gid"]
    assert re.search(rf"groupadd --gid {gid} \w+", image["runs"])
    home = re.search(rf"useradd --uid {uid} --gid {gid} --create-home --home-dir (\S+)", image["runs"])
    assert home, image["runs"]
    assert image["env"]["HOME"] == home.group(1)
    assert image["env"]["HF_HOME"].startswith(home.group(1) + "/")


def test_the_working_directory_belongs_to_the_user(image):
    owned = re.search(rf"install -d -o {image['uid']} -g {image['gid']} -m 0755 (\S+)", image["runs"])
    assert owned and owned.group(1) == image["workdir"] == "/workdir"


def test_no_credentials_in_the_image():
    names = [
        name
        for word, args in _instructions()
        if word in ("ENV", "ARG")
        for name in re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)(?==|\s|$)", args)
    ]
    assert names and not [n for n in names if re.search(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", n, re.IGNORECASE)]
