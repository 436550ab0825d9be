package demo

import "go.mongodb.org/mongo-driver/v2/bson"

// The demo's validator (a $jsonSchema collection validator). It rejects a
// realistic small fraction of the December 2010 order lines — 1,171 of
// 42,481 rows (2.76 %) — for three reasons a real shop could have:
//
//   - Quantity ≥ 1 (minimum: 1): 798 rows, the cancellations (InvoiceNo
//     "C…") and stock adjustments, whose quantities are negative;
//   - UnitPrice > 0 (minimum: 0 with exclusiveMinimum: true): 273 rows with
//     a price of 0 (samples, damages);
//   - StockCode is a product code ^\d{5}[A-Za-z]{0,2}$ (pattern): 200 rows
//     of postage, carriage, manual and fee lines (POST, DOT, M, C2, …) —
//     the rule that is too strict, and that Widened drops.
//
// Quantity < 1 or UnitPrice ≤ 0 alone is 1,001 rows (2.36 %); 170 rows fail
// only the StockCode pattern.
//
// CustomerID is optional on purpose: it is missing in 36.8 % of December
// 2010's rows, and a validator that required it would dead-letter over a
// third of the data. When present it must be an int (the loader turns
// "17850.0" into 17850); when empty the loader leaves the field out.
// Description is optional too (125 rows have none).
func Validator() bson.D { return validator(true) }

// Widened is Validator without the StockCode pattern: what the shop
// deploys once it accepts postage and fee lines. Replaying the backlog
// under it writes the 170 lines that failed only the pattern; the others
// are still invalid.
func Widened() bson.D { return validator(false) }

// StockCodePattern is the StockCode pattern of Validator.
const StockCodePattern = `^\d{5}[A-Za-z]{0,2}$`

func validator(strict bool) bson.D {
	stock := bson.D{{Key: "bsonType", Value: "string"}}
	if strict {
		stock = append(stock, bson.E{Key: "pattern", Value: StockCodePattern})
	}
	return bson.D{{Key: "$jsonSchema", Value: bson.D{
		{Key: "bsonType", Value: "object"},
		{Key: "required", Value: bson.A{"InvoiceNo", "StockCode", "Quantity", "InvoiceDate", "UnitPrice", "Country"}},
		{Key: "properties", Value: bson.D{
			{Key: "InvoiceNo", Value: bson.D{{Key: "bsonType", Value: "string"}}},
			{Key: "StockCode", Value: stock},
			{Key: "Description", Value: bson.D{{Key: "bsonType", Value: "string"}}},
			{Key: "Quantity", Value: bson.D{{Key: "bsonType", Value: "int"}, {Key: "minimum", Value: 1}}},
			{Key: "InvoiceDate", Value: bson.D{{Key: "bsonType", Value: "date"}}},
			{Key: "UnitPrice", Value: bson.D{{Key: "bsonType", Value: "double"}, {Key: "minimum", Value: 0}, {Key: "exclusiveMinimum", Value: true}}},
			{Key: "CustomerID", Value: bson.D{{Key: "bsonType", Value: "int"}}},
			{Key: "Country", Value: bson.D{{Key: "bsonType", Value: "string"}}},
		}},
	}}}
}
