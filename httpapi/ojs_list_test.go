package httpapi_test

import (
	"fmt"
	"slices"
	"testing"
)

// GET /ojs/v1/queues pages in name order (ojs-queues.md 5.1): by offset and
// by cursor, each page naming exactly the queues that follow the last one,
// with the total of what the filters keep and the listed queues' counts.
func TestOJSListPagesInNameOrder(t *testing.T) {
	s := newStack(t)
	var want []string
	for i := range 7 {
		name := fmt.Sprintf("lst-%d", 6-i) // created out of order
		s.ojs("POST", "/ojs/v1/queues", `{"name":"`+name+`"}`).want(t, 201)
		want = append(want, name)
	}
	slices.Sort(want)
	s.qpush("lst-3", "", "a", "b")
	s.ojs("POST", "/ojs/v1/queues/lst-5/pause", "").want(t, 200)

	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		path := "/ojs/v1/queues?prefix=lst-&limit=3"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		a := s.ojs("GET", path, "").want(t, 200)
		if a.num(t, "pagination.total") != 7 {
			t.Fatalf("total: %s", a.Raw)
		}
		for _, q := range a.at("queues").([]any) {
			m := q.(map[string]any)
			got = append(got, m["name"].(string))
			if m["name"] == "lst-3" && fmt.Sprint(m["available"]) != "2" {
				t.Errorf("lst-3 counts: %s", a.Raw)
			}
		}
		next, _ := a.at("pagination.next_cursor").(string)
		if a.at("pagination.has_more") != (next != "") {
			t.Fatalf("has_more and next_cursor disagree: %s", a.Raw)
		}
		if next == "" {
			break
		}
		cursor = next
		if pages > 5 {
			t.Fatal("the cursor does not advance")
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages by cursor listed %v, want %v", got, want)
	}

	a := s.ojs("GET", "/ojs/v1/queues?prefix=lst-&limit=2&offset=5", "").want(t, 200)
	if qs := a.at("queues").([]any); len(qs) != 2 || qs[0].(map[string]any)["name"] != "lst-5" ||
		qs[1].(map[string]any)["name"] != "lst-6" || a.at("pagination.has_more") != false || a.num(t, "pagination.offset") != 5 {
		t.Fatalf("offset 5: %s", a.Raw)
	}
	a = s.ojs("GET", "/ojs/v1/queues?prefix=lst-&offset=9", "").want(t, 200)
	if qs := a.at("queues").([]any); len(qs) != 0 || a.num(t, "pagination.total") != 7 {
		t.Fatalf("offset past the end: %s", a.Raw)
	}
	a = s.ojs("GET", "/ojs/v1/queues?prefix=lst-&state=paused", "").want(t, 200)
	if qs := a.at("queues").([]any); len(qs) != 1 || qs[0].(map[string]any)["name"] != "lst-5" || a.num(t, "pagination.total") != 1 {
		t.Fatalf("state=paused: %s", a.Raw)
	}
}
