package backoff_test

import (
	"fmt"
	"time"

	"github.com/courierkit/courier/backoff"
)

func ExampleBackoff_Delay() {
	p := backoff.Backoff{Base: time.Second, Factor: 2, Max: 30 * time.Second}
	for attempt := 1; attempt <= 6; attempt++ {
		fmt.Print(p.Delay(attempt, nil), " ")
	}
	fmt.Println()
	// Output: 1s 2s 4s 8s 16s 30s
}

// A zero field takes the default of the config holding the Backoff;
// NoJitter stays, and turns the jitter off.
func ExampleBackoff_WithDefaults() {
	defaults := backoff.Backoff{Base: time.Second, Factor: 2, Max: 30 * time.Second, Jitter: 0.2}
	fmt.Printf("%+v\n", backoff.Backoff{Base: 5 * time.Second}.WithDefaults(defaults))
	noJitter := backoff.Backoff{Jitter: backoff.NoJitter}.WithDefaults(defaults)
	fmt.Printf("%+v\n", noJitter)
	fmt.Println(noJitter.Validate(), noJitter.Delay(3, nil))
	// Output:
	// {Base:5s Factor:2 Max:30s Jitter:0.2}
	// {Base:1s Factor:2 Max:30s Jitter:-1}
	// <nil> 4s
}
