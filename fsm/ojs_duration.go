package fsm

import (
	"errors"
	"strconv"
)

// ErrDuration reports a duration outside the ISO 8601 subset OJS accepts.
var ErrDuration = errors.New("invalid ISO 8601 duration")

// ErrDurationRange reports a duration of the accepted form whose value is
// too large to represent (a range error, not a form error).
var ErrDurationRange = errors.New("ISO 8601 duration out of range")

// ParseDuration parses the ISO 8601 subset of ojs-queues.md section 0.2:
// P[nW][nD][T[nH][nM][n[.fff]S]], case-sensitive, at least one component,
// only seconds may have a fraction (any number of digits, read to the
// microsecond), T must be followed
// by a component, no years or months. It returns the length in microseconds.
// A string of that form whose value is over 2^62 µs (about 146,000 years)
// gets ErrDurationRange; any other bad string gets ErrDuration.
func ParseDuration(s string) (int64, error) {
	if len(s) < 2 || s[0] != 'P' {
		return 0, ErrDuration
	}
	const maxMicros = int64(1) << 62
	var total int64
	overflow := false // the form is checked to the end before a range error
	add := func(n, unit int64) {
		if overflow || n > maxMicros/unit || total+n*unit > maxMicros {
			overflow = true
			return
		}
		total += n * unit
	}
	i := 1
	// Date part: W then D, each optional, in that order.
	order := 0 // 1 after W, 2 after D
	components := 0
	inTime := false
	timeOrder := 0 // 1 after H, 2 after M, 3 after S
	timeComponents := 0
	for i < len(s) {
		if s[i] == 'T' {
			if inTime {
				return 0, ErrDuration
			}
			inTime = true
			i++
			if i == len(s) {
				return 0, ErrDuration // T must be followed by a component
			}
			continue
		}
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == start {
			return 0, ErrDuration
		}
		n, err := strconv.ParseInt(s[start:i], 10, 64)
		if err != nil {
			n = maxMicros + 1 // all digits, too many of them: add reports the overflow
		}
		var frac int64
		hasFrac := false
		if i < len(s) && s[i] == '.' {
			i++
			fs := i
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				i++
			}
			digits := i - fs
			if digits == 0 {
				return 0, ErrDuration
			}
			// The spec bounds the digits nowhere; the value is kept to
			// the microsecond and the string as sent.
			digits = min(digits, 6)
			f, _ := strconv.ParseInt(s[fs:fs+digits], 10, 64)
			for d := digits; d < 6; d++ {
				f *= 10
			}
			frac, hasFrac = f, true
		}
		if i == len(s) {
			return 0, ErrDuration // a number without a designator
		}
		d := s[i]
		i++
		if hasFrac && !(inTime && d == 'S') {
			return 0, ErrDuration
		}
		if !inTime {
			switch {
			case d == 'W' && order < 1:
				order = 1
				add(n, 7*86400e6)
			case d == 'D' && order < 2:
				order = 2
				add(n, 86400e6)
			default:
				return 0, ErrDuration
			}
		} else {
			switch {
			case d == 'H' && timeOrder < 1:
				timeOrder = 1
				add(n, 3600e6)
			case d == 'M' && timeOrder < 2:
				timeOrder = 2
				add(n, 60e6)
			case d == 'S' && timeOrder < 3:
				timeOrder = 3
				add(n, 1e6)
				add(frac, 1)
			default:
				return 0, ErrDuration
			}
			timeComponents++
		}
		components++
	}
	if components == 0 || (inTime && timeComponents == 0) {
		return 0, ErrDuration
	}
	if overflow {
		return 0, ErrDurationRange
	}
	return total, nil
}

// FormatSeconds renders a whole number of seconds in the canonical form used
// when a Queen option is shown in the OJS view: days, hours, minutes or
// seconds, whichever divides it.
func FormatSeconds(sec int64) string {
	switch {
	case sec > 0 && sec%86400 == 0:
		return "P" + strconv.FormatInt(sec/86400, 10) + "D"
	case sec > 0 && sec%3600 == 0:
		return "PT" + strconv.FormatInt(sec/3600, 10) + "H"
	case sec > 0 && sec%60 == 0:
		return "PT" + strconv.FormatInt(sec/60, 10) + "M"
	default:
		return "PT" + strconv.FormatInt(sec, 10) + "S"
	}
}

// ceilSeconds converts microseconds to whole seconds, rounding up, at least 1.
func ceilSeconds(us int64) int64 {
	s := (us + 999999) / 1e6
	return max(s, 1)
}
