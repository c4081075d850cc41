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
#define QUANTILES   0      // metadata quantiles: how many (0: a point model, no "quantiles" output)
#define INTERVALS   1      // metadata interval_coverages: how many

// The index of the output called `name` in the file, or -1 where it has none.
long OutputIndex(long model, string name)
  {
   for(long i = 0; i < OnnxGetOutputCount(model); i++)
      if(OnnxGetOutputName(model, i) == name)
         return i;
   return -1;
  }

// Each output's shape set by its name; false where the file lacks one this script reads.
bool SetShapesByName(long model)
  {
   const ulong point_shape[] = {1, HORIZONS};
   const ulong band_shape[] = {1, HORIZONS, INTERVALS};
   const ulong quantile_shape[] = {1, HORIZONS, QUANTILES};
   string points[] = {"forecast", "forecast_close"};
   string bands[] = {"lower", "upper", "forecast_close_lower", "forecast_close_upper"};
   for(int i = 0; i < ArraySize(points); i++)
      if(OutputIndex(model, points[i]) < 0 || !OnnxSetOutputShape(model, OutputIndex(model, points[i]), point_shape))
        { Print("no output ", points[i], " (a log_return model with intervals has it): ", GetLastError()); return false; }
   for(int i = 0; i < ArraySize(bands); i++)
      if(OutputIndex(model, bands[i]) < 0 || !OnnxSetOutputShape(model, OutputIndex(model, bands[i]), band_shape))
        { Print("no output ", bands[i], ": ", GetLastError()); return false; }
   if(QUANTILES > 0 && !OnnxSetOutputShape(model, OutputIndex(model, "quantiles"), quantile_shape))
     { Print("no output quantiles (set QUANTILES to 0 for a point model): ", GetLastError()); return false; }
   return true;
  }

void OnStart()
  {
   long model = OnnxCreateFromBuffer(RnnfleetModel, ONNX_DEFAULT);
   if(model == INVALID_HANDLE) { Print("OnnxCreateFromBuffer: ", GetLastError()); return; }
   // The batch is dynamic in the file: fix it to 1 here; the window is fixed. The input is
   // double: the prices as the terminal has them.
   const ulong in_shape[] = {1, WINDOW_BARS, 5};
   if(!OnnxSetInputShape(model, 0, in_shape) || !SetShapesByName(model))
     { OnnxRelease(model); return; }

   // The last WINDOW_BARS closed 1-minute bars, oldest first: the chart's M1 bars in the
   // broker's time, which must be the zone the model was trained in (metadata timezone).
   MqlRates rates[];
   ArraySetAsSeries(rates, false);
   if(CopyRates(_Symbol, PERIOD_M1, 1, WINDOW_BARS, rates) != WINDOW_BARS)
     { Print("CopyRates: ", GetLastError()); OnnxRelease(model); return; }
   matrix bars(WINDOW_BARS, 5);
   for(int t = 0; t < WINDOW_BARS; t++)
     {
      bars[t][0] = rates[t].open;  bars[t][1] = rates[t].high;
      bars[t][2] = rates[t].low;   bars[t][3] = rates[t].close;
      bars[t][4] = (double)rates[t].tick_volume;  // the volume the training files had (tick or real)
     }
   vectorf forecast(HORIZONS), forecast_close(HORIZONS);
   matrixf quantiles(HORIZONS, MathMax(QUANTILES, 1));
   matrixf lower(HORIZONS, INTERVALS), upper(HORIZONS, INTERVALS);
   matrixf close_lower(HORIZONS, INTERVALS), close_upper(HORIZONS, INTERVALS);
   // OnnxRun takes the outputs in the file's order (metadata "outputs"); the names above
   // checked that the file has each one, and "quantiles" comes second where it is there.
   bool ran = QUANTILES > 0
              ? OnnxRun(model, ONNX_NO_CONVERSION, bars, forecast, quantiles, lower, upper, forecast_close, close_lower, close_upper)
              : OnnxRun(model, ONNX_NO_CONVERSION, bars, forecast, lower, upper, forecast_close, close_lower, close_upper);
   if(!ran)
     { Print("OnnxRun: ", GetLastError()); OnnxRelease(model); return; }
   PrintFormat("%s: log return %+.6g, close %.5f, 90%% interval of the close [%.5f, %.5f]",
               _Symbol, forecast[0], forecast_close[0], close_lower[0][0], close_upper[0][0]);
   OnnxRelease(model);
  }
