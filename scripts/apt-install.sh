# Sourced by the ensure-*.sh scripts (bash, set -e).
#
# apt_install MESSAGE PACKAGE... installs the packages with apt-get, as root
# or through password-less sudo, after printing MESSAGE to stderr, and ends
# the script (exit 0; a failing apt-get ends it with its error). It returns,
# having done nothing, when apt-get cannot be used here.
apt_install() {
  local msg=$1 sudo=""
  shift
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo="sudo"
    else
      return 0
    fi
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    return 0
  fi
  echo "$msg" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
  exit 0
}
