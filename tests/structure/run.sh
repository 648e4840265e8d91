#!/usr/bin/env bash
# tests/structure/run.sh - tools/check-map.py against tiny fixture trees:
# it passes on a tree that keeps its map, and fails on each planted fault
# (an upward call, an upward include, a sideways call, a circle, a named
# circle without its reason, a named circle that is none, a module missing
# from the map, a map line naming no module, a library header included
# outside the folder its `only` line names), tools/check-literals.py on a
# message cut in two, and tools/check-states.py on a state written outside
# its setter (and a setter or a table out of form), and tools/check-sizes.py
# on a function and a file one line over their bounds. Each tree is compiled with cc
# into a build directory with a compile_commands.json, as meson writes it;
# one module sits in a subfolder (src/sub/), as the Redis client will; a
# tier that names its folder keeps its modules in it.
# Prints TAP lines; exits 1 when a case went the wrong way.
#   tests/structure/run.sh
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd) || exit 2
CHECK=$ROOT/tools/check-map.py
CC=${CC:-cc}
DIR=$(mktemp -d /tmp/charge-structure.XXXXXX) || exit 2
trap 'rm -rf "$DIR"' EXIT

N=0
FAILED=0

# The clean fixture: base <- sub/mid <- top, and peer beside sub/mid.
fixture() {
	rm -rf "$DIR/t"
	mkdir -p "$DIR/t/src/sub" "$DIR/t/build"
	cat >"$DIR/t/src/LAYERS" <<-'EOF'
		# a fixture map
		tier base  # the bottom
		base
		tier middle  # two peers
		sub/mid peer
		tier top  # the top
		top
	EOF
	cat >"$DIR/t/src/base.h" <<-'EOF'
		int base_value(void);
	EOF
	cat >"$DIR/t/src/base.c" <<-'EOF'
		#include "base.h"
		int base_value(void) { return 1; }
	EOF
	cat >"$DIR/t/src/sub/mid.h" <<-'EOF'
		int mid_value(void);
	EOF
	cat >"$DIR/t/src/sub/mid.c" <<-'EOF'
		#include "mid.h"
		#include "base.h"
		int mid_value(void) { return base_value() + 1; }
	EOF
	cat >"$DIR/t/src/peer.h" <<-'EOF'
		int peer_value(void);
	EOF
	cat >"$DIR/t/src/peer.c" <<-'EOF'
		#include "peer.h"
		#include "base.h"
		int peer_value(void) { return base_value() + 2; }
	EOF
	cat >"$DIR/t/src/top.h" <<-'EOF'
		int top_value(void);
	EOF
	cat >"$DIR/t/src/top.c" <<-'EOF'
		#include "top.h"
		#include "sub/mid.h"
		#include "peer.h"
		int top_value(void) { return mid_value() + peer_value(); }
	EOF
}

# compile: every .c under src/ into build/, and the compile_commands.json
compile() {
	local f obj sep='' rc=0
	(
		cd "$DIR/t/build" || exit 1
		echo '[' >compile_commands.json
		for f in $(cd .. && find src -name '*.c' | sort); do
			obj=$(echo "$f" | tr / _).o
			"$CC" -c -I../src -I../src/sub -o "$obj" "../$f" 2>>cc.log || rc=1
			printf '%s{"directory": "%s", "file": "../%s", "output": "%s"}\n' \
				"$sep" "$DIR/t/build" "$f" "$obj" >>compile_commands.json
			sep=','
		done
		echo ']' >>compile_commands.json
		exit $rc
	)
}

# expect pass|fail NAME [PATTERN]: runs the checker on the fixture; with
# fail, its output must also match PATTERN (the reason it gives).
expect() {
	local want=$1 name=$2 pattern=${3:-} out rc
	N=$((N + 1))
	if ! compile; then
		echo "not ok $N - $name: the fixture does not compile"
		sed 's/^/# /' "$DIR/t/build/cc.log"
		FAILED=$((FAILED + 1))
		return
	fi
	out=$(python3 "$CHECK" "$DIR/t/src" "$DIR/t/build" 2>&1)
	rc=$?
	if [ "$want" = pass ] && [ $rc -eq 0 ]; then
		echo "ok $N - $name: the check passes"
	elif [ "$want" = fail ] && [ $rc -eq 1 ] && grep -qE -- "$pattern" <<<"$out"; then
		echo "ok $N - $name: the check fails ($(grep -m1 -oE -- "$pattern" <<<"$out"))"
	else
		echo "not ok $N - $name: want $want${pattern:+ matching /$pattern/}, got status $rc"
		sed 's/^/# /' <<<"$out"
		FAILED=$((FAILED + 1))
	fi
}

fixture
expect pass "a tree that keeps its map (one module in a subfolder)"

# an upward call: base calls top, with no include to show it
fixture
cat >>"$DIR/t/src/base.c" <<'EOF'
int top_value(void);
int base_calls_up(void) { return top_value(); }
EOF
expect fail "planted upward call (base.c calls top_value())" \
	'up: uses top \(tier top, step 3\) from tier base, step 1: top_value\(\)'

# an upward include, without a call
fixture
sed -i '1i #include "top.h"' "$DIR/t/src/base.c"
expect fail "planted upward include (base.c includes top.h)" 'up: uses top .*#include "top.h"'

# a sideways call between the two modules of one step
fixture
cat >>"$DIR/t/src/peer.c" <<'EOF'
int mid_value(void);
int peer_calls_mid(void) { return mid_value(); }
EOF
expect fail "planted sideways call (peer.c calls mid_value() on its own step)" \
	'sideways: uses sub/mid .*mid_value\(\)'

# a circle: base -> top closes top -> sub/mid -> base and top -> peer ->
# base; reported as one circle of four modules, with its arrows
fixture
cat >>"$DIR/t/src/base.c" <<'EOF'
int top_value(void);
int base_calls_up(void) { return top_value(); }
EOF
expect fail "planted circle (base -> top -> sub/mid, peer -> base)" \
	'circle base peer sub/mid top is not named'

# the same circle named and explained in the map: the check passes
cat >>"$DIR/t/src/LAYERS" <<'EOF'
circle base peer sub/mid top  # a fixture circle, named on purpose
EOF
expect pass "the planted circle, named and explained in LAYERS"

# named but not explained
sed -i 's/  # a fixture circle, named on purpose//' "$DIR/t/src/LAYERS"
expect fail "a named circle without its reason" 'circle base peer sub/mid top is not explained'

# named while the code has none: the map must be true
fixture
cat >>"$DIR/t/src/LAYERS" <<'EOF'
circle base top  # not a circle of the code
EOF
expect fail "a named circle the code does not have" 'names circle base top, which is no circle of the code'

# a module missing from the map, and a map line naming no module
fixture
printf 'int extra_value(void) { return 3; }\n' >"$DIR/t/src/extra.c"
expect fail "a module missing from LAYERS" 'extra .*|not in src/LAYERS'
fixture
sed -i 's/^top$/top gone/' "$DIR/t/src/LAYERS"
expect fail "a LAYERS entry with no module" 'gone is in src/LAYERS but is no module'

# a module moved into a folder, still named by its file name in the map:
# read as that module, with a note to write its path
fixture
sed -i 's|^sub/mid peer$|mid peer|' "$DIR/t/src/LAYERS"
expect pass "a map naming sub/mid by its file name only (a module moved into a folder)"

# a tier that names its folder: its modules must lie in it (the tree shows
# the layers); sub/mid in tier middle whose folder is sub/ passes, and peer
# beside it at src/ fails; tier top at "." (src/ itself) holds top
fixture
sed -i 's|^tier middle  # two peers$|tier middle sub/  # two peers|; s|^tier top  # the top$|tier top .  # the top|' "$DIR/t/src/LAYERS"
expect fail "a module outside its tier's folder (peer at src/, tier middle's folder sub/)" \
	'in tier middle, whose folder is src/sub/, but it is src/peer'
mkdir -p "$DIR/t/src/sub"
mv "$DIR/t/src/peer.c" "$DIR/t/src/peer.h" "$DIR/t/src/sub/"
sed -i 's|#include "peer.h"|#include "sub/peer.h"|' "$DIR/t/src/top.c"
sed -i 's|^sub/mid peer  #|sub/mid sub/peer  #|; s|^sub/mid peer$|sub/mid sub/peer|' "$DIR/t/src/LAYERS"
expect pass "every module in its tier's folder (tier top at src/ itself)"
sed -i 's|^tier top .  # the top$|tier top sub/  # the top|' "$DIR/t/src/LAYERS"
expect fail "a module at src/ in a tier whose folder is sub/" 'in tier top, whose folder is src/sub/, but it is src/top'

# tools/check-literals.py: a message cut in two fails; one literal per
# output line (each ending in \n) passes; a pending file is only counted
literals() {
	local want=$1 name=$2 out rc
	shift 2
	N=$((N + 1))
	out=$(python3 "$ROOT/tools/check-literals.py" "$DIR/t/src" "$@" 2>&1)
	rc=$?
	if { [ "$want" = pass ] && [ $rc -eq 0 ]; } ||
		{ [ "$want" = fail ] && [ $rc -eq 1 ] &&
			grep -q 'base.c: a literal cut in two at line(s) 5' <<<"$out"; }; then
		echo "ok $N - $name: check-literals says $want"
	else
		echo "not ok $N - $name: want $want, got status $rc"
		sed 's/^/# /' <<<"$out"
		FAILED=$((FAILED + 1))
	fi
}
fixture
cat >>"$DIR/t/src/base.c" <<'EOF'
const char *base_usage = "usage: base [-x]\n"
			 "  -x  the x option\n";
const char *base_message = "a message that "
			   "was cut in two";
EOF
literals fail "a message cut across two literals"
literals pass "the same file, pending its owner's rewrite" --pending src/base.c
sed -i '/^const char \*base_message/,$d' "$DIR/t/src/base.c"
literals pass "a text of two lines, one literal each"

# tools/check-map.py's `only` lines: a library header kept to one folder
fixture
sed -i '1i #include <stdint.h>' "$DIR/t/src/sub/mid.c"
cat >>"$DIR/t/src/LAYERS" <<'EOF'
only sub/ stdint.h  # the fixture's library, kept to sub/
EOF
expect pass "a library header included only in its folder (only sub/ stdint.h)"
sed -i '1i #include <stdint.h>' "$DIR/t/src/top.c"
expect fail "planted include of a kept header outside its folder (top.c includes <stdint.h>)" \
	'top.c includes <stdint.h>, which only sub/ may'
sed -i 's/  # the fixture.s library, kept to sub.$//' "$DIR/t/src/LAYERS"
expect fail "an only line without its reason" 'only sub/ is not explained'

# tools/check-states.py: a state machine in charge.c's form passes; a
# direct write outside its setter, a blanket self-transition, a missing
# row and a row that allows everything fail
machine() {
	rm -rf "$DIR/m"
	mkdir -p "$DIR/m/src"
	cat >"$DIR/m/src/door.h" <<-'EOF'
		enum door_state { D_SHUT, D_OPEN, D_LOCKED, D_NSTATES };
		struct door {
			enum door_state state;
		};
		void door_open(struct door *d);
	EOF
	cat >"$DIR/m/src/door.c" <<-'EOF'
		#include <assert.h>
		#include "door.h"
		#define B(s) (1u << (s))
		static const unsigned door_allowed[D_NSTATES] = {
			[D_SHUT] = B(D_OPEN) | B(D_LOCKED),
			[D_OPEN] = B(D_SHUT),
			[D_LOCKED] = B(D_SHUT),
		};
		#undef B
		static void
		door_set_state(struct door *d, enum door_state to)
		{
			assert((door_allowed[d->state] & (1u << to)) != 0);
			d->state = to;
		}
		void
		door_open(struct door *d)
		{
			d->state = D_SHUT; /* a new door: its first state */
			door_set_state(d, D_OPEN);
		}
	EOF
	cat >"$DIR/m/src/hall.c" <<-'EOF'
		#include "door.h"
		void hall_walk(struct door *d);
		void
		hall_walk(struct door *d)
		{
			door_open(d);
		}
	EOF
}

# states pass|fail NAME [PATTERN]: check-states.py on the machine fixture
states() {
	local want=$1 name=$2 pattern=${3:-} out rc f
	N=$((N + 1))
	for f in "$DIR"/m/src/*.c; do
		if ! "$CC" -fsyntax-only -I"$DIR/m/src" "$f" 2>"$DIR/m/cc.log"; then
			echo "not ok $N - $name: the fixture does not compile"
			sed 's/^/# /' "$DIR/m/cc.log"
			FAILED=$((FAILED + 1))
			return
		fi
	done
	out=$(python3 "$ROOT/tools/check-states.py" "$DIR/m/src" 2>&1)
	rc=$?
	if [ "$want" = pass ] && [ $rc -eq 0 ]; then
		echo "ok $N - $name: check-states passes"
	elif [ "$want" = fail ] && [ $rc -eq 1 ] && grep -qE -- "$pattern" <<<"$out"; then
		echo "ok $N - $name: check-states fails ($(grep -m1 -oE -- "$pattern" <<<"$out"))"
	else
		echo "not ok $N - $name: want $want${pattern:+ matching /$pattern/}, got status $rc"
		sed 's/^/# /' <<<"$out"
		FAILED=$((FAILED + 1))
	fi
}
machine
states pass "a state machine with one table and one asserting setter"
cat >>"$DIR/m/src/hall.c" <<'EOF'
void hall_lock(struct door *d);
void
hall_lock(struct door *d)
{
	d->state = D_LOCKED;
}
EOF
states fail "planted write of a state outside its setter (hall.c)" \
	'hall.c:[0-9]+: writes the state outside door_set_state'
machine
cat >>"$DIR/m/src/hall.c" <<'EOF'
void hall_reset(struct door *d, enum door_state s);
void
hall_reset(struct door *d, enum door_state s)
{
	d->state = s;
}
EOF
states fail "planted write of the state member by a file that includes its header" \
	'hall.c:[0-9]+: writes the state outside door_set_state'
machine
sed -i 's/assert((door_allowed/assert(d->state == to || (door_allowed/' "$DIR/m/src/door.c"
states fail "a setter with a blanket self-transition" 'allows a blanket self-transition'
machine
sed -i '/\[D_LOCKED\] = B(D_SHUT),/d' "$DIR/m/src/door.c"
states fail "a table without a row for one state" 'door_allowed has no row for D_LOCKED'
machine
sed -i 's/\[D_SHUT\] = B(D_OPEN) | B(D_LOCKED),/[D_SHUT] = ~0u,/' "$DIR/m/src/door.c"
states fail "a row that allows every state" 'door_allowed\[D_SHUT\] allows every state'

# tools/check-sizes.py: a function of 91 lines and a file of 1 001 fail;
# 90 and 1 000 pass
sizes() {
	local want=$1 name=$2 pattern=$3 out rc
	N=$((N + 1))
	out=$(cd "$DIR/s" && python3 "$ROOT/tools/check-sizes.py" --functions=src --files=src 2>&1)
	rc=$?
	if { [ "$want" = pass ] && [ $rc -eq 0 ]; } ||
		{ [ "$want" = fail ] && [ $rc -eq 1 ] && grep -qE -- "$pattern" <<<"$out"; }; then
		echo "ok $N - $name: check-sizes says $want"
	else
		echo "not ok $N - $name: want $want, got status $rc"
		sed 's/^/# /' <<<"$out"
		FAILED=$((FAILED + 1))
	fi
}
# long_c BODY_LINES FILLER_LINES: src/long.c, a function of BODY_LINES + 4
# lines (its name, braces, return) and FILLER_LINES comment lines after it
long_c() {
	rm -rf "$DIR/s"
	mkdir -p "$DIR/s/src"
	{
		printf 'int\nlong_one(int v)\n{\n'
		for _ in $(seq 1 "$1"); do printf '\tv++;\n'; done
		printf '\treturn v;\n}\n'
		for _ in $(seq 1 "$2"); do printf '/* filler */\n'; done
	} >"$DIR/s/src/long.c"
}
long_c 86 0
sizes pass "a function of 90 lines" ''
long_c 87 0
sizes fail "a function of 91 lines" 'long_one\(\) 91 lines'
long_c 86 909
sizes pass "a file of 1 000 lines" ''
long_c 86 910
sizes fail "a file of 1 001 lines" 'long.c: 1001 lines'

echo "1..$N"
[ "$FAILED" -eq 0 ]
