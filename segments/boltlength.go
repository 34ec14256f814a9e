package segments

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrTruncated reports a bbolt file shorter than its own last commit says.
var ErrTruncated = errors.New("file shorter than its last commit: truncated")

// CheckBoltLength fails with ErrTruncated when the bbolt file at path ends
// before the pages its newest valid meta page counts. bbolt maps the file
// and reads those pages without checking the length: opening such a file
// (the state file or the Raft log, both rebuild their freelist by walking
// every page) killed the process with SIGBUS, or with a panic on a goroutine
// of bbolt's own, instead of an error naming the file. A missing or empty
// file is bbolt's to create. The check opens the file read-only, which reads
// the two meta pages only.
func CheckBoltLength(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.Size() == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check length of %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("check length of %s: %w", path, err)
	}
	var want int64
	err = db.View(func(tx *bolt.Tx) error {
		want = tx.Size()
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("check length of %s: %w", path, err)
	}
	if fi.Size() < want {
		return fmt.Errorf("%s is %d bytes, its last commit needs %d: %w", path, fi.Size(), want, ErrTruncated)
	}
	return nil
}
