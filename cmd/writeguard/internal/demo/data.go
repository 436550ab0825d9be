package demo

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// DataSHA256 is the hex SHA-256 of the embedded CSV (see data/README.md).
const DataSHA256 = "7ac7f4b5c7750c8e795a990b1e264dccfd69aa175f950017c94d509d5de0e811"

// DataRows is the number of data rows in the embedded CSV.
const DataRows = 42481

// csvData is UCI "Online Retail", December 2010 (CC BY 4.0; citation in
// data/README.md).
//
//go:embed data/online_retail_sample.csv
var csvData []byte

// CSV returns the embedded data file (header line included).
func CSV() []byte { return csvData }

// Header is the CSV's header, the field names of every order-line
// document.
var Header = []string{"InvoiceNo", "StockCode", "Description", "Quantity", "InvoiceDate", "UnitPrice", "CustomerID", "Country"}

// Row is one CSV record as an order-line document.
type Row struct {
	// Line is the 1-based line number in the CSV (the header is line 1).
	Line int
	// ID is the document's _id: the first 24 hex digits of the SHA-256 of
	// the raw CSV line (without its line ending). Exact duplicate lines get
	// the same _id: the second one meets the _id index as a duplicate key.
	ID string
	// Doc is the document: _id, InvoiceNo, StockCode, Description (absent
	// when empty), Quantity (int32), InvoiceDate (BSON date; the CSV's UK
	// local time read as UTC, which is the same thing in December), UnitPrice
	// (double), CustomerID (int32; absent when empty), Country.
	Doc bson.D
}

// dateLayout is how the CSV writes InvoiceDate.
const dateLayout = "2006-01-02 15:04:05"

// Rows parses the first limit data rows of the embedded CSV (all of them
// when limit ≤ 0).
func Rows(limit int) ([]Row, error) { return ParseCSV(csvData, limit) }

// ParseCSV parses order lines from data (RFC 4180 CSV whose first line is
// Header), at most limit of them when limit > 0.
func ParseCSV(data []byte, limit int) ([]Row, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = len(Header)
	r.ReuseRecord = true
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("demo data: header: %w", err)
	}
	for i, h := range Header {
		if head[i] != h {
			return nil, fmt.Errorf("demo data: header field %d is %q, want %q", i+1, head[i], h)
		}
	}
	n := DataRows
	if limit > 0 && limit < n {
		n = limit
	}
	rows := make([]Row, 0, n)
	start := r.InputOffset()
	for limit <= 0 || len(rows) < limit {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line, _ := r.FieldPos(0)
		if err != nil {
			return nil, fmt.Errorf("demo data: %w", err)
		}
		end := r.InputOffset()
		raw := bytes.TrimRight(data[start:end], "\r\n")
		start = end
		row, err := parseRow(rec, raw)
		if err != nil {
			return nil, fmt.Errorf("demo data: line %d: %w", line, err)
		}
		row.Line = line
		rows = append(rows, row)
	}
	return rows, nil
}

// LineID returns the _id of a raw CSV line.
func LineID(raw []byte) string {
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:12])
}

func parseRow(rec []string, raw []byte) (Row, error) {
	qty, err := strconv.ParseInt(rec[3], 10, 32)
	if err != nil {
		return Row{}, fmt.Errorf("field Quantity %q: %w", rec[3], err)
	}
	date, err := time.ParseInLocation(dateLayout, rec[4], time.UTC)
	if err != nil {
		return Row{}, fmt.Errorf("field InvoiceDate %q: %w", rec[4], err)
	}
	price, err := strconv.ParseFloat(rec[5], 64)
	if err != nil {
		return Row{}, fmt.Errorf("field UnitPrice %q: %w", rec[5], err)
	}
	id := LineID(raw)
	doc := make(bson.D, 0, 9)
	doc = append(doc,
		bson.E{Key: "_id", Value: id},
		bson.E{Key: "InvoiceNo", Value: rec[0]},
		bson.E{Key: "StockCode", Value: rec[1]},
	)
	if rec[2] != "" {
		doc = append(doc, bson.E{Key: "Description", Value: rec[2]})
	}
	doc = append(doc,
		bson.E{Key: "Quantity", Value: int32(qty)},
		bson.E{Key: "InvoiceDate", Value: date},
		bson.E{Key: "UnitPrice", Value: price},
	)
	if rec[6] != "" {
		c, err := strconv.ParseFloat(rec[6], 64)
		if err != nil || c != float64(int32(c)) {
			return Row{}, fmt.Errorf("field CustomerID %q is not a whole number", rec[6])
		}
		doc = append(doc, bson.E{Key: "CustomerID", Value: int32(c)})
	}
	doc = append(doc, bson.E{Key: "Country", Value: rec[7]})
	return Row{ID: id, Doc: doc}, nil
}
