package main

import (
	"maps"
	"testing"
)

func TestStoreApply(t *testing.T) {
	v := func(term, seq int64) version { return version{Term: term, Seq: seq} }
	at := func(ver version, fence int64, data map[string]string) store {
		return store{data: data, version: ver, fence: fence}
	}
	for _, tc := range []struct {
		name  string
		st    store
		p     push
		want  outcome
		after store
	}{
		{
			name:  "put on the version it follows",
			st:    at(v(5, 2), 5, map[string]string{"a": "1"}),
			p:     push{Kind: pushPut, Token: 5, Prev: v(5, 2), Version: v(5, 3), Key: "b", Value: "2"},
			want:  applied,
			after: at(v(5, 3), 5, map[string]string{"a": "1", "b": "2"}),
		},
		{
			name:  "put after a missed write is a gap",
			st:    at(v(5, 1), 5, map[string]string{"a": "1"}),
			p:     push{Kind: pushPut, Token: 5, Prev: v(5, 2), Version: v(5, 3), Key: "b", Value: "2"},
			want:  gap,
			after: at(v(5, 1), 5, map[string]string{"a": "1"}),
		},
		{
			name:  "a follower ahead with a write never acknowledged is a gap too",
			st:    at(v(5, 3), 5, map[string]string{"a": "1", "x": "unacked"}),
			p:     push{Kind: pushSync, Token: 9, Prev: v(5, 2), Version: v(5, 2)},
			want:  gap,
			after: at(v(5, 3), 9, map[string]string{"a": "1", "x": "unacked"}),
		},
		{
			name:  "a new leader's first write follows the old leader's version",
			st:    at(v(5, 2), 5, map[string]string{}),
			p:     push{Kind: pushPut, Token: 9, Prev: v(5, 2), Version: v(9, 1), Key: "k", Value: "v"},
			want:  applied,
			after: at(v(9, 1), 9, map[string]string{"k": "v"}),
		},
		{
			name:  "a deposed leader is refused",
			st:    at(v(9, 1), 9, map[string]string{"k": "v"}),
			p:     push{Kind: pushPut, Token: 5, Prev: v(9, 1), Version: v(5, 3), Key: "k", Value: "old"},
			want:  stale,
			after: at(v(9, 1), 9, map[string]string{"k": "v"}),
		},
		{
			name:  "a fence heard from the election refuses the old leader too",
			st:    at(v(5, 2), 9, map[string]string{}),
			p:     push{Kind: pushPut, Token: 5, Prev: v(5, 2), Version: v(5, 3), Key: "k", Value: "late"},
			want:  stale,
			after: at(v(5, 2), 9, map[string]string{}),
		},
		{
			name:  "sync at the same version",
			st:    at(v(5, 2), 5, map[string]string{"a": "1"}),
			p:     push{Kind: pushSync, Token: 9, Prev: v(5, 2), Version: v(5, 2)},
			want:  applied,
			after: at(v(5, 2), 9, map[string]string{"a": "1"}),
		},
		{
			name:  "full replaces everything",
			st:    at(v(5, 3), 5, map[string]string{"a": "1", "x": "unacked"}),
			p:     push{Kind: pushFull, Token: 9, Version: v(5, 2), Data: map[string]string{"a": "1"}},
			want:  applied,
			after: at(v(5, 2), 9, map[string]string{"a": "1"}),
		},
		{
			name:  "full of an empty store",
			st:    at(v(5, 3), 5, map[string]string{"a": "1"}),
			p:     push{Kind: pushFull, Token: 9, Version: v(0, 0)},
			want:  applied,
			after: at(v(0, 0), 9, map[string]string{}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.st
			if got := st.apply(tc.p); got != tc.want {
				t.Fatalf("apply = %s, want %s", got, tc.want)
			}
			if st.version != tc.after.version || st.fence != tc.after.fence || !maps.Equal(st.data, tc.after.data) {
				t.Fatalf("after apply: %+v, want %+v", st, tc.after)
			}
		})
	}
}

func TestVersionNext(t *testing.T) {
	if got := (version{Term: 5, Seq: 2}).next(5); got != (version{Term: 5, Seq: 3}) {
		t.Errorf("next in the same term = %+v", got)
	}
	if got := (version{Term: 5, Seq: 2}).next(9); got != (version{Term: 9, Seq: 1}) {
		t.Errorf("next in a new term = %+v", got)
	}
}

func TestStoreFullIsACopy(t *testing.T) {
	st := newStore()
	st.apply(push{Kind: pushPut, Token: 1, Version: version{Term: 1, Seq: 1}, Key: "a", Value: "1"})
	p := st.full(1)
	st.apply(push{Kind: pushPut, Token: 1, Prev: version{Term: 1, Seq: 1}, Version: version{Term: 1, Seq: 2}, Key: "a", Value: "2"})
	if p.Data["a"] != "1" || p.Version != (version{Term: 1, Seq: 1}) {
		t.Fatalf("full push changed by a later write: %+v", p)
	}
}
