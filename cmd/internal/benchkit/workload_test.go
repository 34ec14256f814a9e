package benchkit

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

// TestValidateRateNotANumber: --rate is a finite number: the flag check
// refuses NaN (which no pacing comparison catches) and Inf, neither of
// which a --json report could hold (json: unsupported value).
//
// Issue 5: "--json output"; --rate: "messages per second over all
// producers ... (0: as fast as they are answered)".
func TestValidateRateNotANumber(t *testing.T) {
	for _, rate := range []float64{math.NaN(), math.Inf(1)} {
		c := testConfig(ModeBoth, 10, 1, 1)
		c.Rate, c.IdleTimeout = rate, time.Second
		err := c.Validate()
		if err == nil {
			_, jerr := json.Marshal(&Report{Broker: "crown", Workload: *c})
			t.Errorf("--rate %v accepted; the JSON report then fails: %v", rate, jerr)
		}
	}
}
