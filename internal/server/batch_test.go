package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// jobStatus is GET /v1/batch/{id} as a client reads it.
type jobStatus struct {
	Status    string `json:"status"`
	Total     int    `json:"total"`
	Completed int    `json:"completed"`
	Failed    int    `json:"failed"`
	Canceled  int    `json:"canceled"`
	Results   []struct {
		Status string `json:"status"`
		Tier   string `json:"tier"`
		Error  *struct {
			Code string `json:"code"`
		} `json:"error"`
	} `json:"results"`
}

// submitBatch posts a batch of messages as user and returns the job id.
func submitBatch(t *testing.T, srv *httptest.Server, user string, messages []string) string {
	t.Helper()
	msgs := make([]map[string]string, len(messages))
	for i, m := range messages {
		msgs[i] = map[string]string{"message": m, "locale": "en"}
	}
	body, _ := json.Marshal(map[string]any{"messages": msgs, "feature": "catalog_enrichment"})
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/batch", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		JobID string `json:"jobId"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&got)
	if resp.StatusCode != http.StatusAccepted || got.JobID == "" {
		t.Fatalf("batch submit: %d %+v", resp.StatusCode, got)
	}
	return got.JobID
}

// getBatch reads a job's status as user.
func getBatch(t *testing.T, srv *httptest.Server, user, id string) (int, jobStatus) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/batch/"+id, nil)
	req.Header.Set("X-User-Id", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st jobStatus
	_ = json.NewDecoder(resp.Body).Decode(&st)
	return resp.StatusCode, st
}

// waitBatch polls a job until it is done, failing the test after limit.
func waitBatch(t *testing.T, srv *httptest.Server, user, id string, limit time.Duration) jobStatus {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		code, st := getBatch(t, srv, user, id)
		if code != http.StatusOK {
			t.Fatalf("GET batch: %d", code)
		}
		if st.Status == "done" || st.Status == "canceled" {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch still %s after %v: %+v", st.Status, limit, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
