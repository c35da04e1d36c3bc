package cli

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDurationText(t *testing.T) {
	cases := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{1206036934 * time.Nanosecond, "1.21s"},
		{12345678 * time.Nanosecond, "12.3ms"},
		{123456789 * time.Nanosecond, "123ms"},
		{987654 * time.Nanosecond, "988µs"},
		{1500 * time.Nanosecond, "1.5µs"},
		{42 * time.Nanosecond, "42ns"},
		{61*time.Minute + 123456789, "1h1m0s"},
		{12345678912 * time.Nanosecond, "12.3s"},
		{-1206036934 * time.Nanosecond, "-1.21s"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) { require.Equal(t, c.want, durationText(c.in)) })
	}
}
