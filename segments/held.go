package segments

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// SnapshotHeld is the space of blob files that only snapshots still hold:
// files the store removed (retention, acknowledgment or a deletion emptied
// them) whose hard links in snapshot directories keep their bytes on disk.
type SnapshotHeld struct {
	// Newest is held by the newest snapshot: a newer snapshot frees it
	// once the older ones are gone.
	Newest int64
	// Older is held only by older snapshots: removing them frees it.
	Older int64
}

// Total is every byte only snapshots hold.
func (h SnapshotHeld) Total() int64 { return h.Newest + h.Older }

// SnapshotHeld measures what the snapshot directories dirs (newest first,
// as the snapshot store lists them) hold of blob files the store no longer
// uses. A file of the newest directory counts when the store has no file
// of its number; the newest snapshot's copy of the file that was active
// when it was taken is not dead space, and another snapshot would copy
// it again. A file of an older directory counts too when the store's file
// of that number is another file (an older snapshot's copy of its active
// file, or a file from before a restore renumbered the store) and the
// newest does not link it. A file linked from several directories counts
// once. Directories that vanish meanwhile (a snapshot reaped) are skipped.
func (s *Store) SnapshotHeld(dirs []string) (SnapshotHeld, error) {
	var held SnapshotHeld
	counted := map[uint64][]os.FileInfo{} // by number: the same file may sit in several directories
	for i, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return held, fmt.Errorf("list snapshot directory: %w", err)
		}
		for _, e := range entries {
			no, ok := parseBlobFileName(e.Name())
			if !ok {
				continue
			}
			st, err := os.Stat(filepath.Join(dir, e.Name()))
			if err != nil {
				continue // reaped meanwhile
			}
			if slices.ContainsFunc(counted[no], func(c os.FileInfo) bool { return os.SameFile(c, st) }) {
				continue
			}
			live := s.liveAs(no, st, i == 0)
			if i == 0 {
				// Recorded even when live: a store rebuilt from this
				// snapshot uses copies under the same numbers, and an
				// older snapshot's link to a file this one links too
				// frees nothing when the older one goes.
				counted[no] = append(counted[no], st)
				if !live {
					held.Newest += st.Size()
				}
				continue
			}
			if live {
				continue
			}
			counted[no] = append(counted[no], st)
			held.Older += st.Size()
		}
	}
	return held, nil
}

// liveAs reports whether the store still uses the file a snapshot holds as
// st under number no: by number alone in the newest snapshot (nameOnly),
// as the same file in an older one.
func (s *Store) liveAs(no uint64, st os.FileInfo, nameOnly bool) bool {
	f, err := s.blobs.handle(no)
	if err != nil {
		return false
	}
	if nameOnly {
		return true
	}
	live, err := f.Stat()
	return err == nil && os.SameFile(live, st)
}

// parseBlobFileName is the inverse of blobFileName.
func parseBlobFileName(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, ".seg")
	if !ok {
		return 0, false
	}
	no, err := strconv.ParseUint(hex, 16, 64)
	return no, err == nil && name == blobFileName(no)
}
