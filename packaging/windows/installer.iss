; Inno Setup script: dist\s2studio\ (from packaging\build.py) -> dist\s2studio-<version>-windows-setup.exe
;
;   iscc /DAppVersion=0.1.0 packaging\windows\installer.iss
;
; The version comes from s2studio.__version__ (the workflow passes it with /DAppVersion).
; DiskSpanning: a torch bundle can pass Inno's 2 GB single-file limit (ANCHORS 5.1, buzz:installer.iss).

#ifndef AppVersion
  #error Pass the version: iscc /DAppVersion=X.Y.Z packaging\windows\installer.iss
#endif

[Setup]
AppId={{6C1C8E3B-8A2E-4C55-9C4C-52D0A7F1B2C1}
AppName=s2studio
AppVersion={#AppVersion}
AppVerName=s2studio {#AppVersion}
AppPublisher=s2studio
DefaultDirName={autopf}\s2studio
DefaultGroupName=s2studio
DisableProgramGroupPage=yes
; Per-user install by default (no admin prompt); the user may choose all users.
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
SourceDir=..\..
OutputDir=dist
OutputBaseFilename=s2studio-{#AppVersion}-windows-setup
SetupIconFile=resources\s2studio.ico
UninstallDisplayIcon={app}\s2studio.exe
Compression=lzma2/normal
SolidCompression=no
DiskSpanning=yes
DiskSliceSize=max
WizardStyle=modern

[Files]
Source: "dist\s2studio\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\s2studio"; Filename: "{app}\s2studio.exe"
Name: "{autodesktop}\s2studio"; Filename: "{app}\s2studio.exe"; Tasks: desktopicon

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Run]
Filename: "{app}\s2studio.exe"; Description: "{cm:LaunchProgram,s2studio}"; Flags: nowait postinstall skipifsilent
