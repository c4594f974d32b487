# Shared by the offline stand-ins (sourced): nothing can be downloaded here, so every install
# is answered from what the image already has, and what it lacks is said (stderr, with the
# marker "mte-offline:") and recorded in missing.log while an image is being built (the log is
# read-only afterwards: writing it then fails in silence, never into a test's output).
MTE_OFFLINE_DIR=/usr/lib/mte/offline
MTE_OFFLINE_LOG=$MTE_OFFLINE_DIR/missing.log

mte_note() { echo "mte-offline: $*" >&2; }
mte_record() { { echo "$*" >> "$MTE_OFFLINE_LOG"; } 2>/dev/null || true; }

# mte_python_has REQUIREMENT: is the distribution installed (any version)? Prints its version.
mte_python_has() {
  local name="$1"
  name="${name%%[<>=!~;[ @]*}"
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
    req="${req//[\"\']/}"
    case "$req" in -*|*/*|*.whl|*.tar.gz|.|"") continue;; esac
    if version="$(mte_python_has "$req")"; then
      mte_note "$req: using the image's ${req%%[<>=!~;[ @]*} $version (no download)"
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

# mte_pip ARGS...: pip. "install" of requirements succeeds when each is installed already (any
# version) and fails, saying which, otherwise; "install" of a local project (".", a path)
# builds it with the image's tools, no index and no isolation; the rest goes to pip itself.
mte_pip() {
  local args=("$@") i j reqs=() local_paths=() line
  for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
      --python|--cache-dir|--log|--proxy|--timeout) i=$((i + 1)); continue;;
      -*) continue;;
    esac
    if [ "${args[i]}" != install ]; then break; fi
    for ((j = i + 1; j < ${#args[@]}; j++)); do
      case "${args[j]}" in
        -r|--requirement)
          j=$((j + 1))
          while read -r line || [ -n "$line" ]; do
            line="${line%%#*}"; [ -n "${line// }" ] && reqs+=("$line")
          done < "${args[j]}";;
        -e|--editable) j=$((j + 1)); local_paths+=("${args[j]}");;
        -i|--index-url|--extra-index-url|-f|--find-links|-c|--constraint|-t|--target|--prefix|--root|--platform|--python-version|--implementation|--abi|--src|--upgrade-strategy|--progress-bar|--config-settings|-C)
          j=$((j + 1));;
        -*) ;;
        .|./*|/*|../*) local_paths+=("${args[j]}");;
        *) reqs+=("${args[j]}");;
      esac
    done
    mte_python_install "${reqs[@]}" || return 1
    if [ "${#local_paths[@]}" -gt 0 ]; then
      mte_note "pip install ${local_paths[*]}: built offline (no index, no build isolation)"
      /usr/bin/python3 -m pip install --no-index --no-build-isolation --no-deps \
        --break-system-packages --root-user-action=ignore "${args[@]:i+1}" || {
        mte_record "local project not installable offline: ${local_paths[*]}"; return 1; }
    fi
    return 0
  done
  /usr/bin/python3 -m pip "$@"
}

# mte_apt ARGS...: apt-get. "update" and the like are skipped; "install" succeeds for packages
# the image has (a name in provides.txt when every package it stands for is installed) and
# records the ones it lacks (the build goes on without them: its notes say what is missing).
mte_apt() {
  local sub="" arg pkg skip=0 seen=0 missing=()
  for arg in "$@"; do
    case "$arg" in -*) ;; *) sub="$arg"; break;; esac
  done
  case "$sub" in
    install)
      for arg in "$@"; do
        if [ "$skip" = 1 ]; then skip=0; continue; fi
        case "$arg" in
          -o|-t|-c|--option|--target-release|--config-file) skip=1; continue;;
          -*) continue;;
          install) if [ "$seen" = 0 ]; then seen=1; continue; fi;;
        esac
        pkg="${arg%%=*}"; pkg="${pkg%%:*}"
        mte_apt_has "$pkg" || missing+=("$pkg")
      done
      if [ "${#missing[@]}" -gt 0 ]; then
        mte_note "apt-get install: not in the offline image, skipped: ${missing[*]}"
        for pkg in "${missing[@]}"; do mte_record "apt package not installed: $pkg"; done
      fi
      return 0;;
    update|upgrade|dist-upgrade|full-upgrade|clean|autoclean|autoremove|remove|purge)
      mte_note "apt-get $sub: skipped (no network; packages come with the image)"
      return 0;;
    *)
      mte_note "apt-get $sub: not available offline"
      return 100;;
  esac
}

# mte_apt_has PACKAGE: installed, or a name of provides.txt whose packages all are.
mte_apt_has() {
  local name="$1" line deps dep
  dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q "install ok installed" && return 0
  line="$(grep -m1 "^$name:" "$MTE_OFFLINE_DIR/provides.txt" 2>/dev/null)" || return 1
  deps="${line#*:}"
  for dep in $deps; do
    dpkg-query -W -f='${Status}' "$dep" 2>/dev/null | grep -q "install ok installed" || return 1
  done
  return 0
}
