package fsm

import (
	"fmt"
	"testing"

	"github.com/crownmq/crown/segments"
)

func TestUnpassed(t *testing.T) {
	p := &segments.Partition{FirstOffset: 3, NextOffset: 21} // offsets 3..20
	grp := func(next, skipFrom, skipTo uint64) *segments.Group {
		return &segments.Group{Next: next, SkipFrom: skipFrom, SkipTo: skipTo}
	}
	for _, tc := range []struct {
		name string
		gs   []*segments.Group
		want string
	}{
		{"no group: everything stored", nil, "[{3 20}]"},
		{"one group", []*segments.Group{grp(8, 0, 0)}, "[{8 20}]"},
		{"a position before the first stored offset", []*segments.Group{grp(1, 0, 0)}, "[{3 20}]"},
		{"the slowest decides", []*segments.Group{grp(12, 0, 0), grp(6, 0, 0)}, "[{6 20}]"},
		{"a group at the end", []*segments.Group{grp(21, 0, 0)}, "[]"},
		{"a skip range leaves a gap", []*segments.Group{grp(4, 7, 15)}, "[{4 6} {15 20}]"},
		{"a skip to the end", []*segments.Group{grp(4, 7, 21)}, "[{4 6}]"},
		{"another group fills part of the gap", []*segments.Group{grp(4, 7, 21), grp(10, 12, 21)}, "[{4 6} {10 11}]"},
		{"another group fills it all", []*segments.Group{grp(4, 7, 21), grp(7, 0, 0)}, "[{4 20}]"},
		{"touching spans join", []*segments.Group{grp(4, 7, 21), grp(7, 9, 21)}, "[{4 8}]"},
		{"a position inside its own range", []*segments.Group{grp(9, 7, 15)}, "[{15 20}]"},
		{"a range behind the position", []*segments.Group{grp(16, 7, 15)}, "[{16 20}]"},
	} {
		if got := fmt.Sprint(unpassed(p, tc.gs)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
		// The spans hold exactly the offsets some group has not passed.
		for off := p.FirstOffset; off < p.NextOffset; off++ {
			want := len(tc.gs) == 0
			for _, g := range tc.gs {
				want = want || !g.Passed(off)
			}
			in := false
			for _, s := range unpassed(p, tc.gs) {
				in = in || off >= s.first && off <= s.last
			}
			if in != want {
				t.Errorf("%s: offset %d in the spans %v, but some group has not passed it: %v", tc.name, off, in, want)
			}
		}
	}
	if got := unpassed(&segments.Partition{FirstOffset: 5, NextOffset: 5}, []*segments.Group{grp(1, 0, 0)}); got != nil {
		t.Errorf("an empty partition: %v", got)
	}
}
