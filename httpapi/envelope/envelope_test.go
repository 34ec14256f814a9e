package envelope

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

const testKey = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

func TestSealOpenRoundTrip(t *testing.T) {
	k, err := ParseKey(testKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, pt := range [][]byte{[]byte(`{"a":1}`), []byte(`null`), {}, bytes.Repeat([]byte("x"), 1<<20)} {
		env, err := k.Seal(pt)
		if err != nil {
			t.Fatal(err)
		}
		if len(pt) > 4 && bytes.Contains(env, pt) {
			t.Fatal("envelope contains the plaintext")
		}
		got, err := k.Open(env)
		if err != nil || !bytes.Equal(got, pt) {
			t.Fatalf("open: %v, %q", err, got)
		}
	}
}

func TestSealIsRandomised(t *testing.T) {
	k, _ := ParseKey(testKey)
	a, _ := k.Seal([]byte("same"))
	b, _ := k.Seal([]byte("same"))
	if bytes.Equal(a, b) {
		t.Fatal("two seals of the same plaintext are identical: nonce reused")
	}
}

func TestParseKey(t *testing.T) {
	cases := []struct {
		in      string
		enabled bool
		errLike string
	}{
		{"", false, ""},
		{testKey, true, ""},
		{strings.ToUpper(testKey), true, ""},
		{"abcd", false, "64 hex characters"},
		{strings.Repeat("zz", 32), false, "not hexadecimal"},
	}
	for _, c := range cases {
		k, err := ParseKey(c.in)
		if c.errLike != "" {
			if err == nil || !strings.Contains(err.Error(), c.errLike) {
				t.Errorf("ParseKey(%q) error %v, want %q", c.in, err, c.errLike)
			}
			continue
		}
		if err != nil || k.Enabled() != c.enabled {
			t.Errorf("ParseKey(%q) = enabled %v, %v", c.in, k.Enabled(), err)
		}
	}
}

func TestOpenRejectsTamperingAndWrongKey(t *testing.T) {
	k, _ := ParseKey(testKey)
	other, _ := ParseKey(strings.Repeat("ab", 32))
	env, _ := k.Seal([]byte(`{"secret":true}`))
	bad := bytes.Clone(env)
	bad[len(bad)-1] ^= 1
	for name, tc := range map[string]struct {
		k   *Key
		env []byte
	}{
		"tampered": {k, bad}, "wrong key": {other, env}, "short": {k, env[:5]},
		"version": {k, append([]byte{9}, env[1:]...)},
	} {
		if _, err := tc.k.Open(tc.env); !errors.Is(err, ErrOpen) {
			t.Errorf("%s: err %v", name, err)
		}
	}
	var none Key
	if _, err := none.Seal([]byte("x")); !errors.Is(err, ErrNoKey) {
		t.Errorf("seal without key: %v", err)
	}
}

func FuzzOpen(f *testing.F) {
	k, _ := ParseKey(testKey)
	env, _ := k.Seal([]byte(`{"a":1}`))
	f.Add(env)
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if pt, err := k.Open(b); err == nil {
			again, _ := k.Seal(pt)
			if back, err := k.Open(again); err != nil || !bytes.Equal(back, pt) {
				t.Fatal("re-seal round trip failed")
			}
		}
	})
}
