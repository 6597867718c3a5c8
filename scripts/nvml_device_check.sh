#!/usr/bin/env bash
# NVML device check: run `provisioner agent` once against the real GPU(s) of this machine.
#
#   bash scripts/nvml_device_check.sh            # from the repository root
#
# Read-only by construction: it runs only `provisioner agent --once`, `--once --json` and a
# two-sample agent pass without a controller, which call NVML getters and (in the two-sample
# pass) register for Xid events. It never runs nvidia-smi with a setting (-pm, -pl, -mig, -r,
# -ac, -c ...), never creates or destroys MIG instances, and never resets a GPU.
#
# Python: the repo's .venv if it has what the agent needs, else python3 if it has, else a
# throwaway venv in $TMPDIR (system site-packages visible) with the agent's few dependencies
# installed by pip (nvidia-ml-py is the nvml extra); the repo itself goes on PYTHONPATH, so the
# command run is `python -m provisioner.cli agent ...` (what the `provisioner` script runs).
# Every step has a timeout; the whole check finishes well under 5 minutes.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$(pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
START=$(date +%s)
AGENT_DEPS=("nvidia-ml-py>=12.535" "pydantic>=2.6" "typer>=0.12" "httpx>=0.27" "tenacity>=8.2")

section() { printf '\n===== %s (t+%ss)\n' "$1" "$(($(date +%s) - START))"; }

has_deps() {
    "$1" -c 'import pynvml, pydantic, typer, httpx, tenacity, provisioner.agent.cli' \
        >/dev/null 2>&1
}

section "machine"
echo "host: $(hostname)  kernel: $(uname -r)"
if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 20 nvidia-smi -L || echo "(nvidia-smi -L failed: rc=$?)"
else
    echo "(nvidia-smi not on PATH)"
fi

section "python"
PY=""
for cand in "$ROOT/.venv/bin/python" python3 python; do
    if command -v "$cand" >/dev/null 2>&1 && has_deps "$cand"; then
        PY=$(command -v "$cand")
        break
    fi
done
if [[ -z "$PY" ]]; then
    BASE=$(command -v python3 || command -v python || true)
    if [[ -z "$BASE" ]]; then
        echo "FAIL: no python3 on this machine"
        exit 1
    fi
    VENV="${TMPDIR:-/tmp}/nvml-device-check-venv"
    echo "creating $VENV from $BASE and installing: ${AGENT_DEPS[*]}"
    if [[ ! -x "$VENV/bin/python" ]]; then
        timeout 60 "$BASE" -m venv --system-site-packages "$VENV" || {
            echo "FAIL: could not create a venv (python3-venv missing?)"
            exit 1
        }
    fi
    timeout 180 "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
        --retries 1 --timeout 20 "${AGENT_DEPS[@]}" || echo "(pip install failed: rc=$?)"
    if has_deps "$VENV/bin/python"; then
        PY="$VENV/bin/python"
    else
        echo "FAIL: the agent's dependencies are not importable; pip output above says why"
        exit 1
    fi
fi
echo "python: $PY ($("$PY" --version 2>&1))"
"$PY" -c 'import importlib.metadata as m; print("nvidia-ml-py", m.version("nvidia-ml-py"))' \
    2>/dev/null || true

run_agent() {
    local label=$1
    shift
    section "$label"
    echo "\$ provisioner agent $*"
    timeout 90 "$PY" -m provisioner.cli agent "$@" 2>&1
    local rc=$?
    echo "----- exit code: $rc"
    return "$rc"
}

run_agent "agent --once (Prometheus text)" --once
RC_TEXT=$?
JSON_OUT="${TMPDIR:-/tmp}/nvml-device-check-payload.json"
run_agent "agent --once --json (push payload)" --once --json | tee "$JSON_OUT"
RC_JSON=${PIPESTATUS[0]}

# MIG, read only: each GPU's current and pending MIG mode as nvidia-smi queries them, and the MIG
# instances the agent read through NVML (profile, memory). Nothing here changes a mode or an
# instance: `--query-gpu` only reads, and the agent only calls NVML getters.
section "MIG (read only)"
if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 20 nvidia-smi --query-gpu=index,name,mig.mode.current,mig.mode.pending \
        --format=csv || echo "(nvidia-smi --query-gpu failed: rc=$?)"
fi
"$PY" - "$JSON_OUT" <<'PY' || echo "(no payload to read MIG from)"
import json, sys
text = open(sys.argv[1], encoding="utf-8").read()
if "{" not in text:
    sys.exit(1)
doc = json.loads(text[text.index("{"):text.rindex("}") + 1])
for g in doc.get("gpus", []):
    print(f"GPU {g.get('index')}: mig_enabled={g.get('mig_enabled')}")
migs = doc.get("mig_instances", [])
print(f"MIG instances: {len(migs)}")
for m in migs:
    print(f"  GPU {m.get('gpu_index')} GI {m.get('gpu_instance_id')} {m.get('profile')}"
          f" mem {m.get('mem_used_mib')}/{m.get('mem_total_mib')} MiB jobs {m.get('jobs')}")
PY
# Two samples through the serving loop (Xid event registration included), no controller, no port.
run_agent "agent: two samples via the loop" --count 2 --interval 1 --listen off
RC_LOOP=$?

section "summary"
echo "exit codes: text=$RC_TEXT json=$RC_JSON loop=$RC_LOOP (0 ok, 3 no NVML/driver/GPU)"
echo "elapsed: $(($(date +%s) - START))s"
if [[ $RC_TEXT -eq 0 && $RC_JSON -eq 0 && $RC_LOOP -eq 0 ]]; then
    echo "RESULT: OK"
    exit 0
fi
echo "RESULT: FAIL"
exit 1
