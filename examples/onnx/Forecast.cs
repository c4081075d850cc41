// Forecasts from an rnnfleet ONNX file in C# with Microsoft.ML.OnnxRuntime (NuGet).
//   dotnet add package Microsoft.ML.OnnxRuntime
// Written for docs/export.md and not compiled here (no .NET on rnnfleet's test machine).
using System;
using System.Linq;
using Microsoft.ML.OnnxRuntime;
using Microsoft.ML.OnnxRuntime.Tensors;

public static class RnnfleetForecast
{
    // bars: the last window_bars 1-minute bars, oldest first, each {open, high, low, close, volume},
    // in the time zone the model was trained in (metadata "timezone"). Doubles: the input is
    // double, the prices as the platform has them.
    public static void Run(string modelPath, double[][] bars)
    {
        using var session = new InferenceSession(modelPath);
        var meta = session.ModelMetadata.CustomMetadataMap;
        int window = int.Parse(meta["window_bars"]);
        var input = new DenseTensor<double>(new[] { 1, window, 5 });   // [batch, window_bars, 5]
        for (int t = 0; t < window; t++)
            for (int c = 0; c < 5; c++)
                input[0, t, c] = bars[bars.Length - window + t][c];
        var feeds = new[] { NamedOnnxValue.CreateFromTensor(meta["input_name"], input) };
        using var results = session.Run(feeds);
        // Every output by its name: a quantile model has "quantiles" before "lower".
        Tensor<float> Output(string name) => results.FirstOrDefault(r => r.Name == name)?.AsTensor<float>();
        var forecast = Output("forecast");                 // [batch, horizons]
        var close = Output("forecast_close");              // log_return only
        var lower = Output("lower");                       // [batch, horizons, intervals]
        var upper = Output("upper");
        var horizons = meta["horizons"].Split(',');
        for (int k = 0; k < horizons.Length; k++)
        {
            var line = $"{meta["dataset"]} {horizons[k]} bar(s) ahead: {forecast[0, k]}";
            if (close != null) line += $" (close {close[0, k]})";
            if (lower != null && upper != null)
                line += $"; {meta["interval_coverages"].Split(',')[0]} interval [{lower[0, k, 0]}, {upper[0, k, 0]}]";
            Console.WriteLine(line);
        }
    }
}
