# Shared by the offline stand-ins (sourced): nothing can be downloaded here, so every install
# is answered from what the image already has, and what it lacks is said (stderr, with the
# marker "mte-offline:") and recorded in missing.log while an image is being built.
MTE_OFFLINE_LOG=/usr/lib/mte/offline/missing.log

mte_note() { echo "mte-offline: $*" >&2; }
mte_record() { echo "$*" >> "$MTE_OFFLINE_LOG" 2>/dev/null || true; }

# mte_python_has REQUIREMENT: is the distribution installed (any version)? Prints its version.
mte_python_has() {
  local name="$1"
  name="${name%%[<>=!~;[ ]*}"
  [ -n "$name" ] || return 0
  /usr/bin/python3 -I -c 'import importlib.metadata as m, sys
try:
    print(m.version(sys.argv[1]))
except m.PackageNotFoundError:
    sys.exit(1)' "$name" 2>/dev/null
}

# mte_python_install REQUIREMENTS...: succeed when every one is installed already.
mte_python_install() {
  local req version missing=()
  for req in "$@"; do
    case "$req" in -*|*/*|*.whl|*.tar.gz|.) continue;; esac
    if version="$(mte_python_has "$req")"; then
      mte_note "$req: using the image's ${req%%[<>=!~;[ ]*} $version (no download)"
    else
      missing+=("$req")
    fi
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    mte_note "not installed in the offline image: ${missing[*]}"
    for req in "${missing[@]}"; do mte_record "python package not installed: $req"; done
    return 1
  fi
  return 0
}
