# Sourced by the setup scripts (not run by the `scripts/setup/*.sh` loop).
#
# apt_install PACKAGE...: installs Debian packages quietly, through sudo when not root
# (`env` carries DEBIAN_FRONTEND through sudo, which would otherwise drop it).
apt_install() {
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
  fi
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
