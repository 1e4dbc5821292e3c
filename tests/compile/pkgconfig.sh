#!/bin/sh
# pkgconfig.sh BUILD_DIR SOURCE_DIR CC -- installs the build into a temporary
# prefix and checks what pkg-config says of dlock: Cflags only
# -I<prefix>/include (dlock.h needs no hiredis header, no
# -D_FILE_OFFSET_BITS), Libs -L<prefix>/lib... -ldlock, a static link's
# libraries with hiredis, crypto and dl (libssl is loaded with dlopen, for
# TLS only: never a link dependency); and that a strict C99 program
# builds and links with those flags.
set -eu
build=$1 src=$2 cc=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-pc.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/p" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
pc=$(find "$tmp/p" -name dlock.pc | head -n 1)
[ -n "$pc" ] || { echo "no dlock.pc installed"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
cflags=$(pkg-config --cflags dlock)
libs=$(pkg-config --libs dlock)
static=$(pkg-config --static --libs dlock)
echo "cflags: $cflags"; echo "libs: $libs"; echo "static: $static"
fail=0
[ "$(echo $cflags)" = "-I$tmp/p/include" ] || { echo "FAIL: --cflags should be -I$tmp/p/include only"; fail=1; }
case " $libs " in *" -ldlock "*) ;; *) echo "FAIL: --libs lacks -ldlock"; fail=1 ;; esac
case " $libs " in *hiredis*|*-lssl*) echo "FAIL: --libs (shared) names dlock's private libraries"; fail=1 ;; esac
for l in -lhiredis -lcrypto -ldl; do
    case " $static " in *" $l "*) ;; *) echo "FAIL: --static --libs lacks $l"; fail=1 ;; esac
done
case " $static " in *" -lssl "*) echo "FAIL: --static --libs names libssl, which dlock loads with dlopen"; fail=1 ;; esac
"$cc" -std=c99 -pedantic -Wall -Wextra -Werror $cflags "$src/tests/compile/header_c99.c" -o "$tmp/c99" $libs \
    || { echo "FAIL: a C99 program does not build with pkg-config's flags"; fail=1; }
exit $fail
