#!/bin/sh
# /usr/bin/miaohui: start the packaged Miaohui installed in /opt/miaohui (a one-folder PyInstaller build).
# A script rather than a symlink so the bundle's executable always runs from its own folder.
exec /opt/miaohui/miaohui "$@"
