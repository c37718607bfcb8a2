package tree

import (
	"slices"
	"strings"
)

// FirstChildren returns at most n of a node's children: the first in the
// order cmp gives (name order when cmp is nil), sorted by it, and the
// node's stat, whose NumChildren counts them all. It needs READ.
//
// Children collects and sorts every name, which for a folder of 200,000
// children costs milliseconds and megabytes under the FSM's read lock,
// while writes wait. FirstChildren keeps only the n best names seen so far
// (a max-heap), so it allocates for n names whatever the folder holds;
// it still visits each child once. For a deterministic result cmp must
// be a total order on names (break ties by name).
func (t *Tree) FirstChildren(path string, auth []Identity, n int, cmp func(a, b string) int) ([]string, Stat, error) {
	nd, err := t.lookup(path)
	if err != nil {
		return nil, Stat{}, err
	}
	if !permitted(nd.acl.acl, PermRead, auth) {
		return nil, Stat{}, ErrNoAuth
	}
	return firstNames(nd.children, n, cmp), nd.stat, nil
}

// firstNames is the n first keys of set in cmp's order, sorted.
func firstNames(set map[string]struct{}, n int, cmp func(a, b string) int) []string {
	if cmp == nil {
		cmp = strings.Compare
	}
	if n <= 0 {
		return []string{}
	}
	h := make([]string, 0, min(n, len(set)))
	for name := range set {
		switch {
		case len(h) < n:
			h = append(h, name)
			if len(h) == n {
				heapify(h, cmp)
			}
		case cmp(name, h[0]) < 0:
			h[0] = name
			siftDown(h, 0, cmp)
		}
	}
	slices.SortFunc(h, cmp)
	return h
}

// heapify orders h as a max-heap under cmp: h[0] is the last name kept,
// the one the next better name replaces.
func heapify(h []string, cmp func(a, b string) int) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDown(h, i, cmp)
	}
}

func siftDown(h []string, i int, cmp func(a, b string) int) {
	for {
		big := i
		if l := 2*i + 1; l < len(h) && cmp(h[l], h[big]) > 0 {
			big = l
		}
		if r := 2*i + 2; r < len(h) && cmp(h[r], h[big]) > 0 {
			big = r
		}
		if big == i {
			return
		}
		h[i], h[big] = h[big], h[i]
		i = big
	}
}
