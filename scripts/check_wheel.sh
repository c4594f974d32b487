#!/usr/bin/env bash
# The wheel works without the source checkout: build it, install it into a fresh venv OUTSIDE
# the checkout, and from a folder outside the checkout run one MT/DeepCoder-v0 and one
# MT/Terminal-v0 episode through the installed console script, in their Docker sandboxes.
#
#   bash scripts/check_wheel.sh        (after scripts/test.sh's setup: .venv, images built)
#
# The fresh venv gets the wheel with --no-deps; its dependencies are the test venv's
# site-packages, added as plain path entries (a .pth of paths processes no further .pth, so the
# checkout's editable install stays out, even when the test venv is the checkout's .venv). What this proves is the wheel's own content: its
# modules, its package data (the bundled tasks, the image definitions), its entry point.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
py="$repo/.venv/bin/python"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/mte-wheel.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS

# from a copy of the files git tracks (or would), so no stale build/ of the checkout gets in
mkdir "$tmp/src"
git ls-files -z -co --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$tmp/src"
"$py" -m pip wheel -q --no-deps -w "$tmp/dist" "$tmp/src" >/dev/null  # isolated: setuptools>=77
wheel="$(ls "$tmp"/dist/multiturn_envs-*.whl)"
echo "check_wheel: $(basename "$wheel") built in $((SECONDS - start)) s"
"$py" -m venv --without-pip "$tmp/venv"
"$py" -m pip --python "$tmp/venv/bin/python" install -q --no-deps --no-index "$wheel"
site="$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
"$py" - "$repo" > "$site/_mte_test_deps.pth" <<'EOF'
import os, sys
repo = os.path.realpath(sys.argv[1])
venv = os.path.join(repo, ".venv")  # the test venv may live in the checkout (CI's does)
for entry in sys.path:
    real = os.path.realpath(entry) if entry else ""
    inside = (real + os.sep).startswith(repo + os.sep)
    in_venv = (real + os.sep).startswith(venv + os.sep)
    if entry and os.path.isdir(entry) and (not inside or in_venv):
        print(entry)
EOF

echo "check_wheel: installed in a fresh venv at $((SECONDS - start)) s"
cd "$tmp"
cli="$tmp/venv/bin/multiturn-envs"
"$tmp/venv/bin/python" - "$repo" <<'EOF'
import os, sys
import multiturn_envs
from multiturn_envs.sandbox.recipes import recipes_folder
repo = os.path.realpath(sys.argv[1])
where = os.path.realpath(multiturn_envs.__file__)
assert not where.startswith(repo + os.sep), f"imported from the checkout: {where}"
recipes = recipes_folder()
for name in ("Dockerfile", "bootstrap.sh", "finalize.sh", "terminal/Dockerfile", "terminal/packages.txt"):
    assert (recipes / name).is_file(), f"the wheel lacks sandboxes/{name} (as multiturn_envs/sandbox/images/)"
print(f"check_wheel: multiturn_envs from {where}; image definitions in {recipes}")
EOF
"$cli" sandbox status
"$cli" sandbox terminal status
# `sandbox build` from the wheel's own copy of sandboxes/ (the base is reused: the wheel's recipe
# digest must equal the one the image was built from, or status would not say ready). It
# rebuilds the default terminal image in place, so only under CI=true (a machine of its own) or
# when asked: MTE_CHECK_WHEEL_BUILD=1.
if [ "${CI:-}" = true ] || [ "${MTE_CHECK_WHEEL_BUILD:-}" = 1 ]; then
  t0=$SECONDS
  "$cli" sandbox terminal build
  "$cli" sandbox terminal status | grep -q "terminal image: ready"
  echo "check_wheel: sandbox terminal build from the wheel: $((SECONDS - t0)) s"
fi
for env in MT/DeepCoder-v0 MT/Terminal-v0; do
  out="$tmp/$(echo "$env" | tr '/' '_').jsonl"
  t0=$SECONDS
  "$cli" eval "$env" --policy expert --tasks 1 --samples 1 --max-turns 4 --out "$out" -q
  "$tmp/venv/bin/python" - "$out" "$env" <<'EOF'
import sys
from multiturn_envs.harness import read_run
run = read_run(sys.argv[1])
(record,) = run.records
assert record["success"], f"{sys.argv[2]}: the expert failed its episode from the wheel: {record}"
print(f"check_wheel: {sys.argv[2]} task {record['task_id']}: solved in {record['turns']} turn(s)")
EOF
  echo "check_wheel: $env episode from the wheel: $((SECONDS - t0)) s"
done
echo "check_wheel: wheel built, installed outside the checkout and run in $((SECONDS - start)) s"
