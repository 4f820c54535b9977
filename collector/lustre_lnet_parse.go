package collector

// Parser of what `lnetctl net show -v 2` and `lnetctl peer show -v 2`
// print: YAML written by one of two printers with the same keys.
//
//   - Up to 2.15 lnetctl builds the tree itself through ioctls and prints
//     it with cYAML (lustre_lnet_show_net and lustre_lnet_show_peer in
//     lnet/utils/lnetconfig/liblnetconfig.c): four columns per level, a
//     sequence item as "    - key: value" under its key.
//   - From 2.16 the kernel answers over netlink (the key tables in
//     lnet/lnet/api-ni.c) and lnetctl prints the answer with libyaml at
//     an indent of six (LNET_DEFAULT_INDENT): a sequence item as
//     "-     key: value", in the column of its key.
//
// The parser therefore reads the structure from the columns keys start in,
// not from a fixed indent, and keeps only the few keys it exports: each
// local NI's net type, nid, status and health value, each peer NI's nid,
// state and health value. Everything else (statistics, tunables, a key a
// newer lnetctl adds) is skipped without a word; a line counts as bad only
// when it is neither a "key: value" line nor a sequence item, or when a
// health value is not a number.

import (
	"bytes"
	"strconv"
	"strings"
)

// lnetIface is one network interface, local or a peer's: its NID, its
// state (a local NI's status: up or down; a peer NI's state: up, down or
// NA) and its health value.
type lnetIface struct {
	nid, state string
	health     int
	hasHealth  bool
}

// lnetNI is one local network interface of `lnetctl net show`.
type lnetNI struct {
	net string
	lnetIface
}

// lnetShow is what one lnetctl show printed.
type lnetShow struct {
	nis   []lnetNI
	peers []lnetIface
	// errMsg is the descr of an error block (show: - net: errno: -100,
	// descr: "cannot get networks: Network is down"), which lnetctl
	// prints instead of the tree when it cannot answer.
	errMsg string
	bad    badLines
}

// lnetFrame is a key whose value is a mapping or sequence on the lines
// below it, and the column the key starts in.
type lnetFrame struct {
	col int
	key string
}

// parseLnetctlShow reads either show's output; a net show fills nis, a
// peer show peers.
func parseLnetctlShow(data []byte) lnetShow {
	var s lnetShow
	var stack []lnetFrame
	var ni *lnetNI
	var peer *lnetIface
	// iface is the interface whose mapping a key of list (local NI(s),
	// peer ni) is in.
	iface := func(list string) *lnetIface {
		switch {
		case list == "local NI(s)" && ni != nil:
			return &ni.lnetIface
		case list == "peer ni":
			return peer
		}
		return nil
	}
	net := ""
	lineNo := 0
	for len(data) > 0 {
		var raw []byte
		raw, data, _ = bytes.Cut(data, []byte{'\n'})
		lineNo++
		line := strings.TrimRight(string(raw), " \r")
		text := strings.TrimLeft(line, " ")
		if text == "" || text[0] == '#' || text == "---" || text == "..." {
			continue
		}
		if text[0] == '\t' {
			s.bad.add(lineNo, "tab in indentation", line)
			continue
		}
		col := len(line) - len(text)
		item := false
		if text == "-" || strings.HasPrefix(text, "- ") {
			item = true
			rest := strings.TrimLeft(text[1:], " ")
			col += len(text) - len(rest)
			text = rest
		}
		key, value, ok := splitLnetKey(text)
		if !ok && !item {
			s.bad.add(lineNo, "neither key: value nor a sequence item", line)
			continue
		}
		// A key closes every mapping that started at its column or
		// right of it.
		for len(stack) > 0 && stack[len(stack)-1].col >= col {
			stack = stack[:len(stack)-1]
		}
		parent, grand := "", ""
		if n := len(stack); n > 0 {
			parent = stack[n-1].key
			if n > 1 {
				grand = stack[n-2].key
			}
		}
		if item {
			switch parent {
			case "net":
				net = ""
			case "local NI(s)":
				s.nis = append(s.nis, lnetNI{net: net})
				ni = &s.nis[len(s.nis)-1]
			case "peer ni":
				s.peers = append(s.peers, lnetIface{})
				peer = &s.peers[len(s.peers)-1]
			}
			if !ok {
				continue // a scalar item ("- 0"), or a bare "-"
			}
		}
		switch {
		case value == "":
			stack = append(stack, lnetFrame{col: col, key: key})
		case key == "net type" && parent == "net":
			net = value
		case key == "descr":
			s.errMsg = value
		case key == "nid" && iface(parent) != nil:
			iface(parent).nid = value
		case (key == "status" || key == "state") && iface(parent) != nil:
			iface(parent).state = value
		case key == "health value" && parent == "health stats" && iface(grand) != nil:
			v, err := strconv.Atoi(value)
			if err != nil {
				s.bad.add(lineNo, "health value is not a number", line)
				continue
			}
			iface(grand).health, iface(grand).hasHealth = v, true
		}
	}
	return s
}

// splitLnetKey splits "key: value" or "key:" and unquotes the value; a
// tag lnetctl puts before an error's text ("! \"Network is down\"") is
// dropped.
func splitLnetKey(text string) (key, value string, ok bool) {
	if k, ok := strings.CutSuffix(text, ":"); ok && !strings.Contains(k, ": ") {
		return k, "", k != ""
	}
	key, value, ok = strings.Cut(text, ": ")
	if !ok || key == "" {
		return "", "", false
	}
	value = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(value), "! "))
	if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
		value = value[1 : len(value)-1]
	}
	return key, value, true
}

// lnetNetOf is the network of a NID: what follows its last '@' (o2ib,
// tcp1, kfi); a NID without one is its own network.
func lnetNetOf(nid string) string {
	if i := strings.LastIndexByte(nid, '@'); i >= 0 {
		return nid[i+1:]
	}
	return nid
}
