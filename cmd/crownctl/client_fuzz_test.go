package main

import (
	"errors"
	"testing"
)

// FuzzDecodeError: error bodies come from whatever answers at --url (a
// proxy, another service). Any body decodes to an *APIError carrying the
// status, never a panic.
func FuzzDecodeError(f *testing.F) {
	for _, s := range []string{
		`{"error":"id is required","code":"missing_field","field":"id"}`,
		`{"error":{"code":"conflict","type":"queue_protected","message":"queue default cannot be deleted","details":{"field":"x"}}}`,
		`{"error":{"details":{"field":7}}}`, `{"error":null,"code":"x"}`, `{"error":[1]}`, `bad gateway`, ``,
	} {
		f.Add(502, s)
	}
	f.Fuzz(func(t *testing.T, status int, body string) {
		err := decodeError(status, "http://n", []byte(body))
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != status {
			t.Fatalf("decodeError(%d, %q) = %#v", status, body, err)
		}
		_ = ae.Error()
	})
}
