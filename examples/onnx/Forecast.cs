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
    // in the time zone the model was trained in (metadata "timezone").
    public static void Run(string modelPath, float[][] bars)
    {
        using var session = new InferenceSession(modelPath);
        var meta = session.ModelMetadata.CustomMetadataMap;
        int window = int.Parse(meta["window_bars"]);
        var input = new DenseTensor<float>(new[] { 1, window, 5 });   // [batch, window_bars, 5]
        for (int t = 0; t < window; t++)
            for (int c = 0; c < 5; c++)
                input[0, t, c] = bars[bars.Length - window + t][c];
        var feeds = new[] { NamedOnnxValue.CreateFromTensor(meta["input_name"], input) };
        using var results = session.Run(feeds);
        var forecast = results.First(r => r.Name == "forecast").AsTensor<float>();   // [batch, horizons]
        var horizons = meta["horizons"].Split(',');
        for (int k = 0; k < horizons.Length; k++)
            Console.WriteLine($"{meta["dataset"]} {horizons[k]} bar(s) ahead: {forecast[0, k]}");
        var upper = results.FirstOrDefault(r => r.Name == "upper")?.AsTensor<float>();  // [batch, horizons, intervals]
        var lower = results.FirstOrDefault(r => r.Name == "lower")?.AsTensor<float>();
        if (lower != null && upper != null)
            Console.WriteLine($"  {meta["interval_coverages"].Split(',')[0]} interval: [{lower[0, 0, 0]}, {upper[0, 0, 0]}]");
    }
}
