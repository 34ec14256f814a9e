// Package envelope seals message payloads with AES-256-GCM for queues with
// encryptionEnabled. Sealing happens on the leader before a push enters the
// Raft log, so neither the log nor the state file holds the plaintext, and
// opening happens when a response is built. The state machine never sees a
// key.
package envelope

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// Version is the first byte of every envelope; a new format gets a new one.
const Version byte = 1

const nonceSize = 12

// ErrNoKey reports that encryption was needed but no key is configured.
var ErrNoKey = errors.New("no encryption key configured (set QUEEN_ENCRYPTION_KEY to 64 hex characters)")

// ErrOpen reports an envelope that does not decrypt with this key.
var ErrOpen = errors.New("encrypted payload does not decrypt with the configured key")

// Key seals and opens envelopes. The zero value has no key.
type Key struct {
	aead cipher.AEAD
}

// ParseKey parses a 64-hex-character (32-byte) key. An empty string yields
// a Key without encryption; anything else that is not a valid key is an error.
func ParseKey(s string) (*Key, error) {
	if s == "" {
		return &Key{}, nil
	}
	if len(s) != 64 {
		return nil, fmt.Errorf("QUEEN_ENCRYPTION_KEY must be 64 hex characters (32 bytes), got %d characters", len(s))
	}
	raw, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("QUEEN_ENCRYPTION_KEY is not hexadecimal: %w", err)
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("QUEEN_ENCRYPTION_KEY: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("QUEEN_ENCRYPTION_KEY: %w", err)
	}
	return &Key{aead: aead}, nil
}

// Enabled reports whether a key is configured.
func (k *Key) Enabled() bool { return k != nil && k.aead != nil }

// Seal returns the envelope of plaintext: version, random nonce, ciphertext and tag.
func (k *Key) Seal(plaintext []byte) ([]byte, error) {
	if !k.Enabled() {
		return nil, ErrNoKey
	}
	out := make([]byte, 1+nonceSize, 1+nonceSize+len(plaintext)+k.aead.Overhead())
	out[0] = Version
	if _, err := rand.Read(out[1 : 1+nonceSize]); err != nil {
		return nil, fmt.Errorf("encryption nonce: %w", err)
	}
	return k.aead.Seal(out, out[1:1+nonceSize], plaintext, out[:1]), nil
}

// Open returns the plaintext of an envelope.
func (k *Key) Open(env []byte) ([]byte, error) {
	if !k.Enabled() {
		return nil, ErrNoKey
	}
	if len(env) < 1+nonceSize+k.aead.Overhead() || env[0] != Version {
		return nil, ErrOpen
	}
	pt, err := k.aead.Open(nil, env[1:1+nonceSize], env[1+nonceSize:], env[:1])
	if err != nil {
		return nil, ErrOpen
	}
	return pt, nil
}
