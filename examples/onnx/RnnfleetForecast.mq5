//+------------------------------------------------------------------+
//| An rnnfleet ONNX file in MetaTrader 5 (MQL5's ONNX functions).    |
//| Written for docs/export.md and not compiled here: MetaEditor runs |
//| on Windows only. Check the window and outputs against             |
//| `rnnfleet export --describe EURUSD_1m.onnx` before trading.       |
//+------------------------------------------------------------------+
#property script_show_inputs
// The file inside the compiled program (or OnnxCreate("EURUSD_1m.onnx", ...) from MQL5\Files).
#resource "\\Files\\EURUSD_1m.onnx" as uchar RnnfleetModel[]

#define WINDOW_BARS 61     // metadata window_bars: seq_len + 1
#define HORIZONS    1      // metadata horizons: how many
#define INTERVALS   1      // metadata interval_coverages: how many (0: leave lower/upper out)

void OnStart()
  {
   long model = OnnxCreateFromBuffer(RnnfleetModel, ONNX_DEFAULT);
   if(model == INVALID_HANDLE) { Print("OnnxCreateFromBuffer: ", GetLastError()); return; }
   // The batch is dynamic in the file: fix it to 1 here; the window is fixed.
   const ulong in_shape[] = {1, WINDOW_BARS, 5};
   const ulong point_shape[] = {1, HORIZONS};
   const ulong band_shape[] = {1, HORIZONS, INTERVALS};
   // Outputs in the order of metadata "outputs" (a log_return model with intervals:
   // forecast, lower, upper, forecast_close, forecast_close_lower, forecast_close_upper).
   if(!OnnxSetInputShape(model, 0, in_shape) || !OnnxSetOutputShape(model, 0, point_shape) ||
      !OnnxSetOutputShape(model, 1, band_shape) || !OnnxSetOutputShape(model, 2, band_shape) ||
      !OnnxSetOutputShape(model, 3, point_shape) || !OnnxSetOutputShape(model, 4, band_shape) ||
      !OnnxSetOutputShape(model, 5, band_shape))
     { Print("OnnxSet...Shape: ", GetLastError()); OnnxRelease(model); return; }

   // The last WINDOW_BARS closed 1-minute bars, oldest first: the chart's M1 bars in the
   // broker's time, which must be the zone the model was trained in (metadata timezone).
   MqlRates rates[];
   ArraySetAsSeries(rates, false);
   if(CopyRates(_Symbol, PERIOD_M1, 1, WINDOW_BARS, rates) != WINDOW_BARS)
     { Print("CopyRates: ", GetLastError()); OnnxRelease(model); return; }
   matrixf bars(WINDOW_BARS, 5);
   for(int t = 0; t < WINDOW_BARS; t++)
     {
      bars[t][0] = (float)rates[t].open;  bars[t][1] = (float)rates[t].high;
      bars[t][2] = (float)rates[t].low;   bars[t][3] = (float)rates[t].close;
      bars[t][4] = (float)rates[t].tick_volume;  // the volume the training files had (tick or real)
     }
   vectorf forecast(HORIZONS), forecast_close(HORIZONS);
   matrixf lower(HORIZONS, INTERVALS), upper(HORIZONS, INTERVALS);
   matrixf close_lower(HORIZONS, INTERVALS), close_upper(HORIZONS, INTERVALS);
   if(!OnnxRun(model, ONNX_NO_CONVERSION, bars, forecast, lower, upper, forecast_close, close_lower, close_upper))
     { Print("OnnxRun: ", GetLastError()); OnnxRelease(model); return; }
   PrintFormat("%s: log return %+.6g, close %.5f, 90%% interval of the close [%.5f, %.5f]",
               _Symbol, forecast[0], forecast_close[0], close_lower[0][0], close_upper[0][0]);
   OnnxRelease(model);
  }
